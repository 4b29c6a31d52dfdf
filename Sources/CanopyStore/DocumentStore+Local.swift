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
