import CanopyCore

/// Local documents: JSON objects keyed by id that never replicate and never appear in the changes
/// feed (replication checkpoints, settings). They have no revisions: a put replaces the body.
extension DocumentStore {
    /// The local document `id`, or nil.
    public func localGet(_ id: String) throws(StoreError) -> JSONValue? {
        try Self.checkLocalID(id)
        let bytes = try read { db in
            try db.queryFirst("SELECT body FROM local_documents WHERE local_id = ?", [.text(id)]) { $0.blob(0) ?? [] }
        }
        guard let bytes else { return nil }
        do {
            return try InputValidation.storedBody(bytes, documentID: id)
        } catch {
            throw .corrupt(detail: "local document \"\(id.prefix(80))\": \(error)")
        }
    }

    /// Stores `body` (a JSON object) as the local document `id`, replacing any previous body.
    public func localPut(_ id: String, body: JSONValue) throws(StoreError) {
        let document = try LocalDocument(id, body: body)
        try write { context in try document.put(context.db) }
    }

    /// Removes the local document `id`. Returns whether it existed.
    @discardableResult
    public func localDelete(_ id: String) throws(StoreError) -> Bool {
        try Self.checkLocalID(id)
        return try write { context in
            try context.db.run("DELETE FROM local_documents WHERE local_id = ?", .text(id))
            return context.db.changes > 0
        }
    }

    /// Stores `body` as the local document `id`, one of the family of ids starting with `prefix`
    /// (which `id` must start with), of which at most `max` are kept: when the family is full,
    /// the ones written longest ago make room. A put moves `id` to the newest of its family, so
    /// a record that is kept up to date is the last to go. One transaction. Returns how many
    /// were removed.
    @discardableResult
    public func localPut(_ id: String, body: JSONValue, keepingAtMost max: Int, withPrefix prefix: String) throws(StoreError) -> Int {
        precondition(max > 0 && id.hasPrefix(prefix), "a family keeps at least one record, and the id is of it")
        let document = try LocalDocument(id, body: body)
        let (low, high) = Self.range(of: prefix)
        return try write { context in
            let db = context.db
            // Deleted and inserted again rather than updated: the row takes the newest rowid,
            // which orders the family by when each was last written.
            try db.run("DELETE FROM local_documents WHERE local_id = ?", .text(id))
            let held = try db.scalarInt("SELECT count(*) FROM local_documents WHERE local_id >= ? AND local_id < ?", .text(low), .text(high)) ?? 0
            var removed = 0
            if held >= Int64(max) {
                try db.run(
                    """
                    DELETE FROM local_documents WHERE rowid IN (
                        SELECT rowid FROM local_documents WHERE local_id >= ? AND local_id < ? ORDER BY rowid LIMIT ?)
                    """,
                    .text(low), .text(high), .integer(held - Int64(max) + 1))
                removed = db.changes
            }
            try document.put(db)
            return removed
        }
    }

    /// The ids of the local documents that start with `prefix`, in id order.
    public func localIDs(withPrefix prefix: String) throws(StoreError) -> [String] {
        let (low, high) = Self.range(of: prefix)
        return try read { db in
            try db.query("SELECT local_id FROM local_documents WHERE local_id >= ? AND local_id < ? ORDER BY local_id", [.text(low), .text(high)]) {
                $0.text(0)
            }
        }
    }

    /// Removes every local document whose id starts with `prefix`; returns how many.
    @discardableResult
    public func localDeleteAll(withPrefix prefix: String) throws(StoreError) -> Int {
        let (low, high) = Self.range(of: prefix)
        return try write { context in
            try context.db.run("DELETE FROM local_documents WHERE local_id >= ? AND local_id < ?", .text(low), .text(high))
            return context.db.changes
        }
    }

    /// The ids starting with `prefix` are those from `prefix` (included) to `prefix` with its
    /// last byte one higher (excluded), in SQLite's byte order; the last byte must be ASCII below
    /// DEL, as the separators callers end their prefixes with are.
    private static func range(of prefix: String) -> (low: String, high: String) {
        var bytes = Array(prefix.utf8)
        precondition(!bytes.isEmpty && bytes[bytes.count - 1] < 0x7F, "a prefix ends with an ASCII character")
        bytes[bytes.count - 1] += 1
        return (prefix, String(decoding: bytes, as: UTF8.self))
    }

    /// Local ids follow the document id rule with their own limit.
    static func checkLocalID(_ id: String) throws(StoreError) {
        let count = id.utf8.count
        guard count > 0 else { throw .invalidInput(.emptyDocumentID) }
        guard count <= StoreLimits.localIDBytesMax else {
            throw .invalidInput(.documentIDTooLong(bytes: count, limit: StoreLimits.localIDBytesMax))
        }
    }
}

/// A local document checked and encoded, to be written inside a transaction: by `localPut`, or
/// together with a batch of foreign revisions (`bulkInsertForeign(checked:local:)`).
package struct LocalDocument: Sendable {
    let id: String
    let bytes: [UInt8]

    /// Checks the id (the document id rule with the local limit) and the body (a JSON object
    /// within `StoreLimits.localBodyBytesMax`), and encodes it.
    package init(_ id: String, body: JSONValue) throws(StoreError) {
        try DocumentStore.checkLocalID(id)
        guard case .object = body else { throw .invalidInput(.bodyNotObject(documentID: id)) }
        let bytes = CanonicalJSON.encode(body)
        guard bytes.count <= StoreLimits.localBodyBytesMax else {
            throw .invalidInput(.bodyTooLarge(documentID: id, bytes: bytes.count, limit: StoreLimits.localBodyBytesMax))
        }
        self.id = id
        self.bytes = bytes
    }

    /// Inserts or replaces the document, in the caller's transaction.
    func put(_ db: Database) throws {
        try db.run(
            "INSERT INTO local_documents(local_id, body) VALUES (?, ?) ON CONFLICT(local_id) DO UPDATE SET body = excluded.body",
            .text(id), .blob(bytes))
    }
}
