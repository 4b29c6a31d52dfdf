import CanopyCore

/// A document as `revisionsToSend` reads it: its revisions and the stored bodies of those the
/// peer asked for (a compacted body is absent). Most documents hold a single revision (written
/// once, then replicated); those build no `RevTree` or dictionary: per document, hashing them into
/// a tree and a body map was a third of the sender's read path.
enum SendingDocument {
    /// The document's only revision, its body, and whether its id is imported.
    case single(RevTree.Node, body: [UInt8]?, importedID: Bool)
    /// A document with several revisions; `importedIDs` are those of `bodies` with imported ids.
    case tree(RevTree, bodies: [RevisionID: [UInt8]], importedIDs: Set<RevisionID>)

    /// The node of `revision`, if the document holds it.
    func node(_ revision: RevisionID) -> RevTree.Node? {
        switch self {
        case .single(let node, _, _): return node.id == revision ? node : nil
        case .tree(let tree, _, _): return tree.node(revision)
        }
    }

    /// `revision` and the ancestors the document holds, newest first, at most `limit` of them
    /// (`RevTree.ancestry`).
    func ancestry(of revision: RevisionID, limit: Int) -> [RevisionID] {
        switch self {
        case .single(let node, _, _): return node.id == revision && limit > 0 ? [revision] : []
        case .tree(let tree, _, _): return tree.ancestry(of: revision, limit: limit)
        }
    }

    /// The stored body of `revision` if it was asked for and not compacted away.
    func body(_ revision: RevisionID) -> [UInt8]? {
        switch self {
        case .single(let node, let body, _): return node.id == revision ? body : nil
        case .tree(_, let bodies, _): return bodies[revision]
        }
    }

    /// True when `revision`'s id is imported (not its content hash).
    func isImported(_ revision: RevisionID) -> Bool {
        switch self {
        case .single(let node, _, let imported): return imported && node.id == revision
        case .tree(_, _, let imported): return imported.contains(revision)
        }
    }
}

/// The reads replication makes for a whole batch of documents, each one statement for the
/// batch: the ids travel as one JSON array, and `json_each` drives the join — per id the
/// `doc_id` index probe, then the range scan of the revisions primary key, with the bodies asked
/// for read in the same scan. One statement per document cost more than the lookups themselves
/// (VDBE start, cursors opened and closed, bind and reset: 0.85 µs for an absent document
/// against 0.18 µs batched, 2.2 µs against 1.2 µs for a present one, in C over 100k documents),
/// and these reads run for every document a replication offers or sends. Results equal the
/// general path's (`RevisionRows.load`, then `RevisionRows.body` per body; checked over random
/// stores in the tests, ids that JSON must escape included).
extension RevisionRows {
    /// For each of `requests` (by position), the document's revisions and the stored bodies of
    /// the revisions requested; nil when the document does not exist.
    static func loadForSending(_ db: Database, _ requests: [RevisionRequest]) throws -> [SendingDocument?] {
        var pending = [PendingDocument?](repeating: nil, count: requests.count)
        func add(_ position: Int, _ node: RevTree.Node, body: [UInt8]?, imported: Bool) {
            if pending[position] == nil {
                pending[position] = .one(node, body: body, importedID: imported)
            } else {
                pending[position]!.add(node, body: body, importedID: imported)
            }
        }
        func add(_ position: Int, _ row: Statement) throws {
            let request = requests[position]
            let node = try revisionNode(row, documentID: request.documentID)
            let body = request.revisions.contains(node.id) ? row.blob(4) : nil
            add(position, node, body: body, imported: body != nil && row.int(3) & importedKindFlag != 0)
            if let closed = try closedChild(row, column: 5, of: node, documentID: request.documentID) {
                add(position, closed, body: request.revisions.contains(closed.id) ? ConflictResolution.closingBody : nil, imported: false)
            }
        }
        let keyed = requests.indices.filter { requests[$0].documentKey != nil }
        if !keyed.isEmpty {
            let statement = try db.statement(
                """
                SELECT r.generation, r.digest, r.parent, r.kind, r.body, r.closed_child, j.key
                FROM json_each(?1) AS j CROSS JOIN revisions AS r ON r.doc_key = j.value
                """)
            var keys: [UInt8] = [UInt8(ascii: "[")]
            keys.reserveCapacity(keyed.count * 8 + 2)
            for (offset, position) in keyed.enumerated() {
                if offset > 0 { keys.append(UInt8(ascii: ",")) }
                CanonicalJSON.writeInteger(requests[position].documentKey!, into: &keys)
            }
            keys.append(UInt8(ascii: "]"))
            try forEachRow(statement, json: keys, keyColumn: 6, count: keyed.count) { index, row in
                try add(keyed[index], row)
            }
        }
        // Requests without a key, and keys that found no rows.
        let byID = requests.indices.filter { pending[$0] == nil }
        try forEachRevisionRow(db, byID.map { requests[$0].documentID }) { index, row in
            try add(byID[index], row)
        }
        return pending.map { $0?.document }
    }

    /// A document's leaves as its row lists them (`documents.leaves`), with its key.
    struct DocumentLeaves {
        let key: Int64
        let leaves: [(revision: RevisionID, kind: RevisionKind)]
    }

    /// For each of `documentIDs` (by position), its key and leaves; nil when it does not exist.
    /// Reads `documents` alone: no revision row.
    static func loadLeaves(_ db: Database, documentIDs: [String]) throws -> [DocumentLeaves?] {
        var found = [DocumentLeaves?](repeating: nil, count: documentIDs.count)
        try forEachRow(
            db, documentIDs,
            batch: "SELECT d.doc_key, d.leaves, j.key FROM json_each(?1) AS j CROSS JOIN documents AS d ON d.doc_id = j.value",
            single: "SELECT doc_key, leaves FROM documents WHERE doc_id = ?", keyColumn: 2
        ) { position, row in
            let leaves = try LeafList.decode(row.borrowedBlob(1), documentID: documentIDs[position]) { ($0, $1) }
            found[position] = DocumentLeaves(key: row.int64(0), leaves: leaves)
        }
        return found
    }

    /// True when the document of `key` holds `revision`: a row of its own (a probe of the
    /// revisions primary key's index, which holds every column it asks about), or, for a closing
    /// tombstone, its parent's row (read only when the first probe finds nothing).
    static func holdsRevision(_ db: Database, key: Int64, revision: RevisionID) throws -> Bool {
        if try holdsRow(db, key: key, revision: revision) { return true }
        guard revision.generation > 1 else { return false }
        let statement = try db.statement("SELECT 1 FROM revisions WHERE doc_key = ? AND generation = ? AND closed_child = ?")
        defer { statement.reset() }
        try statement.bind(key, at: 1)
        try statement.bind(revision.generation - 1, at: 2)
        try statement.bind(digestOf: revision, at: 3)
        return try statement.step()
    }

    /// True when the document of `key` holds a row of its own for `revision`.
    private static func holdsRow(_ db: Database, key: Int64, revision: RevisionID) throws -> Bool {
        let statement = try db.statement("SELECT 1 FROM revisions WHERE doc_key = ? AND generation = ? AND digest = ?")
        defer { statement.reset() }
        try statement.bind(key, at: 1)
        try statement.bind(revision.generation, at: 2)
        try statement.bind(digestOf: revision, at: 3)
        return try statement.step()
    }

    /// Calls `row` with the position of the id and the statement on each revision row of each
    /// document of `ids`: columns generation, digest, parent, kind, body, closed_child.
    private static func forEachRevisionRow(_ db: Database, _ ids: [String], _ row: (Int, Statement) throws -> Void) throws {
        try forEachRow(
            db, ids,
            batch: """
                SELECT r.generation, r.digest, r.parent, r.kind, r.body, r.closed_child, j.key
                FROM json_each(?1) AS j CROSS JOIN documents AS d ON d.doc_id = j.value
                CROSS JOIN revisions AS r ON r.doc_key = d.doc_key
                """,
            single: """
                SELECT r.generation, r.digest, r.parent, r.kind, r.body, r.closed_child
                FROM documents AS d CROSS JOIN revisions AS r ON r.doc_key = d.doc_key WHERE d.doc_id = ?
                """,
            keyColumn: 6, row)
    }

    /// Calls `row` with the position of the id and the statement on each row for `ids`: `batch`
    /// is driven by `json_each(?1)` over the ids JSON can carry (their positions in column
    /// `keyColumn`, the other columns as `single` gives them), and `single`, with the id bound
    /// to its one parameter, runs for each id that JSON cannot (`DocumentIDList.unlisted`).
    private static func forEachRow(
        _ db: Database, _ ids: [String], batch: StaticString, single: StaticString, keyColumn: Int32, _ row: (Int, Statement) throws -> Void
    ) throws {
        guard !ids.isEmpty else { return }
        let list = DocumentIDList(ids)
        try forEachRow(try db.statement(batch), json: list.json, keyColumn: keyColumn, count: ids.count, row)
        guard !list.unlisted.isEmpty else { return }
        let statement = try db.statement(single)
        for position in list.unlisted {
            defer { statement.reset() }
            try statement.bind(ids[position], at: 1)
            while try statement.step() { try row(position, statement) }
        }
    }

    /// Runs a statement driven by `json_each(?1)` over `json` (an array of `count` elements) and
    /// calls `row` with each row's array position, read from `keyColumn`.
    private static func forEachRow(
        _ statement: Statement, json: [UInt8], keyColumn: Int32, count: Int, _ row: (Int, Statement) throws -> Void
    ) throws {
        defer { statement.reset() }
        try statement.bind(utf8Text: json, at: 1)
        while try statement.step() {
            let position = statement.int(keyColumn)
            guard (0..<count).contains(position) else {
                throw StoreError.corrupt(detail: "json_each returned position \(position) of \(count)")
            }
            try row(position, statement)
        }
    }
}

/// Document ids as the text of one JSON array, for `json_each`. An id holding U+0000 does not
/// survive SQLite's JSON decoding (the string ends there, so it would name another document):
/// its place holds `null`, which matches no document, and it is listed in `unlisted` for a
/// statement of its own.
struct DocumentIDList {
    private(set) var json: [UInt8] = []
    private(set) var unlisted: [Int] = []

    init(_ ids: [String]) {
        json.reserveCapacity(ids.reduce(2) { $0 + $1.utf8.count + 3 })
        json.append(UInt8(ascii: "["))
        for (position, id) in ids.enumerated() {
            if position > 0 { json.append(UInt8(ascii: ",")) }
            if id.utf8.contains(0) {
                json.append(contentsOf: "null".utf8)
                unlisted.append(position)
            } else {
                CanonicalJSON.write(.string(id), into: &json)
            }
        }
        json.append(UInt8(ascii: "]"))
    }
}

/// A document's rows as they arrive, before they become a `SendingDocument`: most documents
/// hold a single revision and never build a tree or a dictionary.
private enum PendingDocument {
    case one(RevTree.Node, body: [UInt8]?, importedID: Bool)
    case many([RevTree.Node], bodies: [RevisionID: [UInt8]], importedIDs: Set<RevisionID>)

    /// Adds a further row of the same document, in place.
    mutating func add(_ node: RevTree.Node, body: [UInt8]?, importedID: Bool) {
        switch self {
        case .one(let first, let firstBody, let firstImported):
            var bodies: [RevisionID: [UInt8]] = [:]
            if let firstBody { bodies[first.id] = firstBody }
            if let body { bodies[node.id] = body }
            var imported: Set<RevisionID> = []
            if firstImported { imported.insert(first.id) }
            if importedID { imported.insert(node.id) }
            self = .many([first, node], bodies: bodies, importedIDs: imported)
        case .many(var nodes, var bodies, var imported):
            // Drop self's references first, so the collections grow in place, not as copies.
            self = .one(node, body: nil, importedID: false)
            nodes.append(node)
            if let body { bodies[node.id] = body }
            if importedID { imported.insert(node.id) }
            self = .many(nodes, bodies: bodies, importedIDs: imported)
        }
    }

    var document: SendingDocument {
        switch self {
        case .one(let node, let body, let imported): return .single(node, body: body, importedID: imported)
        case .many(let nodes, let bodies, let imported): return .tree(RevTree(nodes: nodes), bodies: bodies, importedIDs: imported)
        }
    }
}
