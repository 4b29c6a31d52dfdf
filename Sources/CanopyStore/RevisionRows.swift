import CanopyCore

/// A document as loaded for a write: its row key (nil before its first write) and its tree.
struct StoredDocument {
    let id: String
    var key: Int64?
    /// The sequence of the document's row (its rowid), nil before its first write.
    var sequence: Int64?
    /// The document's row said it was conflicted when it was loaded.
    var wasConflicted = false
    /// The tree as stored; the baseline `persist` compares against.
    var storedTree: RevTree
    /// The tree being changed.
    var tree: RevTree
    /// Revisions whose rows may need writing: added, relinked, re-kinded, removed, or whose leaf
    /// status may have changed. Only these are compared with `storedTree` when persisting, so a
    /// write costs O(revisions touched), not O(tree). A list, not a set (it holds a few ids, which
    /// hashing cost more than it saved): an id may appear twice; `persist` writes each once.
    var touched: [RevisionID] = []
    /// Canonical bodies of revisions added in this transaction (never re-read from the file).
    var newBodies = NewBodies()
    /// Those of `newBodies` whose ids are imported (not content hashes).
    var importedIDs: [RevisionID] = []
    /// The closing tombstones kept in their parents' rows (`RevisionRows`, "Closing tombstones"):
    /// as loaded until `persist`, then as written. Usually empty, never more than a few.
    var closedInParentRows: [RevisionID] = []

    init(id: String, key: Int64?, sequence: Int64?, tree: RevTree) {
        self.id = id
        self.key = key
        self.sequence = sequence
        self.storedTree = tree
        self.tree = tree
    }

    /// Records an added revision and its body.
    mutating func noteAdded(_ revision: RevisionID, body: [UInt8]?) {
        touched.append(revision)
        if let parent = tree.node(revision)?.parent { touched.append(parent) }
        if let body { newBodies[revision] = body }
    }
}

/// The bodies of the revisions a write adds, by revision: a handful at most per document, so a
/// list searched in order (hashing revision ids cost more than the search).
struct NewBodies {
    private var entries: [(revision: RevisionID, body: [UInt8])] = []

    subscript(revision: RevisionID) -> [UInt8]? {
        get { entries.first { $0.revision == revision }?.body }
        set {
            let found = entries.firstIndex { $0.revision == revision }
            switch (found, newValue) {
            case (let index?, let body?): entries[index].body = body
            case (let index?, nil): entries.remove(at: index)
            case (nil, let body?): entries.append((revision, body))
            case (nil, nil): break
            }
        }
    }
}

/// Reading and writing the rows of `documents` and `revisions`. Everything here runs inside a
/// `DocumentStore.read`/`write` closure, on the store's one connection.
///
/// Closing tombstones. Settling a conflict closes each losing leaf with a child of kind
/// `.closed` and body `{}`, whose id follows from its parent's. Such a child is kept in its
/// parent's row (`closed_child`, its digest) instead of a row of its own whenever the parent has
/// a row: the resolution updates the losing leaf's row (its leaf flag) or inserts it (a received
/// revision that lost) anyway, and a row of its own cost a second insert into the table and its
/// primary key, the largest single part of what settling a conflict added to a write. Reads see
/// the same tree and revisions: the tree gains the child when its parent's row is read, and its
/// body is `{}` (never dropped by compaction, as a tombstone's own row's may be once the
/// tombstone has children).
/// It gets a row of its own when its parent has none (stemmed away) or its id is imported, and
/// closing tombstones written before the column existed keep theirs: both forms are read.
enum RevisionRows {
    /// Set in a revision row's `kind` column, above the `RevisionKind`, when the revision's id is
    /// imported: taken from another system (CouchDB) and not the hash of its content. Such a
    /// revision is sent marked, so peers accept it without the hash check (`ForeignRevision`).
    static let importedKindFlag = 8
    /// The bits of the `kind` column that hold the `RevisionKind`.
    static let kindMask = 7

    /// Loads a document's row key and tree, or nil when the document does not exist.
    static func load(_ db: Database, documentID: String) throws -> StoredDocument? {
        let lookup = try db.statement("SELECT doc_key, sequence, conflicted FROM documents WHERE doc_id = ?")
        try lookup.bind(documentID, at: 1)
        let found = try lookup.step() ? (key: lookup.int64(0), sequence: lookup.int64(1), conflicted: lookup.int(2) != 0) : nil
        lookup.reset()
        guard let found else { return nil }
        var closedInParentRows: [RevisionID] = []
        let tree = try loadTree(db, key: found.key, documentID: documentID, closedInParentRows: &closedInParentRows)
        var document = StoredDocument(id: documentID, key: found.key, sequence: found.sequence, tree: tree)
        document.wasConflicted = found.conflicted
        document.closedInParentRows = closedInParentRows
        return document
    }

    /// Loads a document for writing: the stored one, or an empty one.
    static func loadForWrite(_ db: Database, documentID: String) throws -> StoredDocument {
        try load(db, documentID: documentID) ?? StoredDocument(id: documentID, key: nil, sequence: nil, tree: RevTree())
    }

    /// Reads a document's tree with one range scan of the revisions primary key.
    static func loadTree(_ db: Database, key: Int64, documentID: String) throws -> RevTree {
        var closedInParentRows: [RevisionID] = []
        return try loadTree(db, key: key, documentID: documentID, closedInParentRows: &closedInParentRows)
    }

    /// `loadTree`, listing in `closedInParentRows` the closing tombstones read from their parents'
    /// rows.
    static func loadTree(_ db: Database, key: Int64, documentID: String, closedInParentRows: inout [RevisionID]) throws -> RevTree {
        let statement = try db.statement("SELECT generation, digest, parent, kind, closed_child FROM revisions WHERE doc_key = ?")
        defer { statement.reset() }
        try statement.bind(key, at: 1)
        var nodes: [RevTree.Node] = []
        while try statement.step() {
            let node = try revisionNode(statement, documentID: documentID)
            nodes.append(node)
            if let closed = try closedChild(statement, column: 4, of: node, documentID: documentID) {
                nodes.append(closed)
                closedInParentRows.append(closed.id)
            }
        }
        return RevTree(nodes: nodes)
    }

    /// The closing tombstone the current row holds in `column` (`closed_child`) as a child of
    /// `parent`, the row's revision, or nil when the row holds none. The row's own revision may
    /// be a closing tombstone too: a tombstone is placed only under a parent that is not one, but
    /// that parent may have been known only by name (an ancestor in a received path, recorded
    /// `.live`) and arrive as a closing tombstone later.
    static func closedChild(_ row: Statement, column: Int32, of parent: RevTree.Node, documentID: String) throws -> RevTree.Node? {
        guard !row.isNull(column) else { return nil }
        guard let id = row.revisionID(generation: parent.id.generation + 1, digestColumn: column) else {
            throw StoreError.corrupt(detail: "closing tombstone under \(parent.id) in \"\(documentID.prefix(80))\"")
        }
        return RevTree.Node(id: id, parent: parent.id, kind: .closed)
    }

    /// True when a new closing tombstone with this kind, body and id may be kept in its parent's
    /// row: it is a closing tombstone with the body `{}` every closing tombstone has, and its id
    /// is its content hash (an imported id keeps its row and its mark). The parent must have a
    /// row and not be a closing tombstone itself; callers check that.
    static func closedChildFitsParentRow(kind: RevisionKind, body: [UInt8]?, importedID: Bool) -> Bool {
        kind.isClosed && !importedID && body == ConflictResolution.closingBody
    }

    /// The node in the current row, whose first four columns are `generation, digest, parent,
    /// kind` of a revision row.
    static func revisionNode(_ row: Statement, documentID: String) throws -> RevTree.Node {
        let generation = row.int(0)
        guard let id = row.revisionID(generation: generation, digestColumn: 1),
            row.int(3) & ~(kindMask | importedKindFlag) == 0,
            let kind = RevisionKind(rawValue: UInt8(truncatingIfNeeded: row.int(3) & kindMask))
        else { throw StoreError.corrupt(detail: "revision row of \"\(documentID.prefix(80))\"") }
        var parent: RevisionID? = nil
        if !row.isNull(2) {
            guard let known = row.revisionID(generation: generation - 1, digestColumn: 2) else {
                throw StoreError.corrupt(detail: "parent of \(id) in \"\(documentID.prefix(80))\"")
            }
            parent = known
        }
        return RevTree.Node(id: id, parent: parent, kind: kind)
    }

    /// The stored canonical body of one revision: nil when the revision is unknown or its body
    /// was dropped.
    static func body(_ db: Database, key: Int64, revision: RevisionID) throws -> [UInt8]? {
        let statement = try db.statement("SELECT body FROM revisions WHERE doc_key = ? AND generation = ? AND digest = ?")
        defer { statement.reset() }
        try statement.bind(key, at: 1)
        try statement.bind(revision.generation, at: 2)
        try statement.bind(digestOf: revision, at: 3)
        return try statement.step() ? statement.blob(0) : nil
    }

    /// The stored body of `revision` checked against its id, for reads that hand a body to the
    /// application: a revision's id is the hash of its parent, kind and body, so a body that no
    /// longer hashes to it (or, for an imported id, does not parse) was damaged in the file and
    /// is `StoreError.damaged`, never returned. Nil when the body was dropped.
    static func verifiedBody(_ db: Database, of document: StoredDocument, node: RevTree.Node) throws -> [UInt8]? {
        if let body = document.newBodies[node.id] { return body }
        if document.closedInParentRows.contains(node.id) { return ConflictResolution.closingBody }
        guard let key = document.key else { return nil }
        let statement = try db.statement("SELECT body, kind FROM revisions WHERE doc_key = ? AND generation = ? AND digest = ?")
        defer { statement.reset() }
        try statement.bind(key, at: 1)
        try statement.bind(node.id.generation, at: 2)
        try statement.bind(digestOf: node.id, at: 3)
        guard try statement.step(), let body = statement.blob(0) else { return nil }
        if !bodyMatches(body, of: node, kindColumn: statement.int(1)) {
            throw StoreError.damaged(StoredDamage(documentID: document.id, revision: node.id, reason: bodyMismatch))
        }
        return body
    }

    /// Why a body that does not hash to its revision id is damage, in words.
    static let bodyMismatch = "its stored body no longer matches the revision id (a damaged file)"

    /// Whether `body`, stored in a row whose `kind` column is `kindColumn`, hashes to `node`'s id.
    /// An imported id (marked, or a root above generation 1) is no hash of its content: taken as it is.
    static func bodyMatches(_ body: [UInt8], of node: RevTree.Node, kindColumn: Int) -> Bool {
        let imported = kindColumn & importedKindFlag != 0 || (node.parent == nil && node.id.generation > 1)
        return imported || RevisionHasher.revisionID(parent: node.parent, kind: node.kind, canonicalBody: body) == node.id
    }

    /// The body of `revision`, from this transaction's new bodies or the file.
    static func body(_ db: Database, of document: StoredDocument, revision: RevisionID) throws -> [UInt8]? {
        if let body = document.newBodies[revision] { return body }
        if document.closedInParentRows.contains(revision) { return ConflictResolution.closingBody }
        guard let key = document.key else { return nil }
        return try body(db, key: key, revision: revision)
    }

    /// Writes what changed in `document` since it was loaded: the documents row (with a new
    /// sequence) and the touched revision rows. Does nothing when nothing was touched.
    /// Returns the document's row key.
    @discardableResult
    static func persist(_ context: WriteContext, _ document: inout StoredDocument) throws -> Int64? {
        guard !document.touched.isEmpty else { return document.key }
        let leaves = document.tree.leaves
        guard let current = RevTree.current(amongLeaves: leaves) else {
            throw StoreError.corrupt(detail: "empty tree for \"\(document.id.prefix(80))\"")
        }
        let conflicted = !RevTree.conflicting(amongLeaves: leaves).isEmpty
        let key = try writeDocumentRow(context, &document, current: current, conflicted: conflicted, leaves: leaves)
        if document.wasConflicted && !conflicted { try KeptImportedConflicts.forget(document.id, context) }
        let placement = ClosedPlacement(&document)
        // Sorted so that rows are written in the same order on every node and every run.
        var previous: RevisionID?
        for revision in document.touched.sorted() where revision != previous {
            previous = revision
            try persistRevision(context.db, key: key, document: document, placement: placement, revision: revision)
        }
        document.storedTree = document.tree
        document.touched = []
        document.closedInParentRows = placement.now
        return key
    }

    /// Where a write keeps the document's closing tombstones (see "Closing tombstones" above):
    /// those kept in their parents' rows before the write and after it.
    struct ClosedPlacement {
        let before: [RevisionID]
        let now: [RevisionID]

        /// Works out `now` from the document's touched revisions, and adds to them the rows a
        /// change of placement rewrites: the parent whose row gains or loses a closing
        /// tombstone, and a closing tombstone that needs a row of its own again (its parent's
        /// row went with stemming).
        init(_ document: inout StoredDocument) {
            before = document.closedInParentRows
            let tree = document.tree
            var now = before.filter { closed in
                guard let parent = tree.node(closed)?.parent else { return false }
                return tree.contains(parent)
            }
            // Every write passes here: a touched revision that is not a closing tombstone is
            // passed over on its kind, before any other lookup.
            for revision in document.touched {
                guard let node = tree.node(revision), node.kind.isClosed, document.storedTree.node(revision) == nil,
                    let parent = node.parent, let parentNode = tree.node(parent), !parentNode.kind.isClosed,
                    !now.contains(revision),
                    RevisionRows.closedChildFitsParentRow(
                        kind: node.kind, body: document.newBodies[revision], importedID: document.importedIDs.contains(revision))
                else { continue }
                now.append(revision)
            }
            for closed in before where !now.contains(closed) {
                document.touched.append(closed)
                if let parent = document.storedTree.node(closed)?.parent, tree.contains(parent) { document.touched.append(parent) }
            }
            self.now = now
        }

        /// The closing tombstone kept in `parent`'s row, before the write or after it.
        func child(of parent: RevisionID, in tree: RevTree, before wasBefore: Bool) -> RevisionID? {
            (wasBefore ? before : now).first { tree.node($0)?.parent == parent }
        }
    }

    /// Writes the document's row at a new sequence (inserting it on its first write, when its
    /// stable key becomes that sequence) and returns its key.
    static func writeDocumentRow(
        _ context: WriteContext, _ document: inout StoredDocument, current: RevTree.Node, conflicted: Bool,
        leaves: [RevTree.Node]
    ) throws -> Int64 {
        let sequence = context.nextSequence()
        let db = context.db
        let statement: Statement
        if let previous = document.sequence {
            statement = try db.statement(
                """
                UPDATE documents SET sequence = ?1, current_generation = ?2, current_digest = ?3, deleted = ?4,
                    conflicted = ?5, leaves = ?6, row_check = ?8 WHERE sequence = ?7
                """)
            try statement.bind(previous, at: 7)
        } else {
            // A plain INSERT (no upsert): the document was looked up in this transaction and does
            // not exist. Its stable key is this first sequence.
            statement = try db.statement(
                """
                INSERT INTO documents(sequence, current_generation, current_digest, deleted, conflicted, leaves, doc_id, doc_key, row_check)
                VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?1, ?8)
                """)
            try statement.bind(document.id, at: 7)
        }
        try statement.bind(sequence, at: 1)
        try statement.bind(current.id.generation, at: 2)
        try statement.bind(digestOf: current.id, at: 3)
        try statement.bind(current.kind.isDeleted ? 1 : 0, at: 4)
        try statement.bind(conflicted ? 1 : 0, at: 5)
        let leafList = LeafList.encode(leaves)
        let key = document.key ?? sequence
        try statement.bind(leafList, at: 6)
        try statement.bind(RowCheck.value(documentKey: key, leaves: leafList, documentID: document.id), at: 8)
        try statement.run()
        let before = document.sequence == nil ? nil : document.storedTree.leaves
        context.noteDocument(
            document.id, before: before.map { ($0, RevTree.current(amongLeaves: $0)?.kind.isDeleted ?? false) },
            after: leaves, deleted: current.kind.isDeleted)
        document.key = key
        document.sequence = sequence
        return key
    }

    /// Inserts one revision row.
    static func insertRevisionRow(_ db: Database, key: Int64, row: RevisionRow) throws {
        let statement = try db.statement(
            "INSERT INTO revisions(doc_key, generation, digest, parent, kind, leaf, body, closed_child) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
        var borrowed: [(index: Int32, value: Statement.Borrowed)] = []
        borrowed.reserveCapacity(4)
        try bindRevisionRow(statement, firstParameter: 1, key: key, row: row, borrowed: &borrowed)
        try statement.runBorrowing(borrowed)
        try nameAttachments(db, body: row.body)
    }

    /// Binds a revision row's integer columns, in the order the INSERTs list them, to parameters
    /// `firstParameter` … `firstParameter + 7`, and appends its digest, parent digest, body and
    /// closed child's digest to `borrowed`, for `Statement.runBorrowing` to bind without a copy.
    static func bindRevisionRow(
        _ statement: Statement, firstParameter first: Int32, key: Int64, row: RevisionRow,
        borrowed: inout [(index: Int32, value: Statement.Borrowed)]
    ) throws(SQLiteError) {
        try statement.bind(key, at: first)
        try statement.bind(row.node.id.generation, at: first + 1)
        try statement.bind(row.kindColumn, at: first + 4)
        try statement.bind(row.isLeaf ? 1 : 0, at: first + 5)
        borrowed.append((first + 2, .digest(row.node.id)))
        borrowed.append((first + 3, .digest(row.node.parent)))
        borrowed.append((first + 6, .blob(row.body)))
        borrowed.append((first + 7, .digest(row.closedChild)))
    }

    /// Brings one revision row in line with the tree: insert, delete, or update its parent link,
    /// kind, leaf flag, closing tombstone and (when it arrived now) body. A closing tombstone kept
    /// in its parent's row has no row of its own: for it, `old` or `new` is nil.
    private static func persistRevision(
        _ db: Database, key: Int64, document: StoredDocument, placement: ClosedPlacement, revision: RevisionID
    ) throws {
        let wasInParentRow = placement.before.contains(revision)
        let old = wasInParentRow ? nil : document.storedTree.node(revision)
        let new = placement.now.contains(revision) ? nil : document.tree.node(revision)
        let closedBefore = old == nil ? nil : placement.child(of: revision, in: document.storedTree, before: true)
        let closedNow = new == nil ? nil : placement.child(of: revision, in: document.tree, before: false)
        let generation = Int64(revision.generation)
        switch (old, new) {
        case (nil, nil):
            return
        case (.some, nil):
            let statement = try db.statement("DELETE FROM revisions WHERE doc_key = ? AND generation = ? AND digest = ?")
            try statement.bind(key, at: 1)
            try statement.bind(generation, at: 2)
            try statement.bind(digestOf: revision, at: 3)
            try statement.run()
        case (nil, .some(let node)):
            // A closing tombstone that leaves its parent's row brings its body back.
            let body = document.newBodies[revision] ?? (wasInParentRow ? ConflictResolution.closingBody : nil)
            try insertRevisionRow(db, key: key, row: RevisionRow(
                node: node, isLeaf: document.tree.isLeaf(revision), body: body,
                importedID: document.importedIDs.contains(revision), closedChild: closedNow))
        case (.some(let before), .some(let after)):
            let wasLeaf = document.storedTree.isLeaf(revision)
            let isLeaf = document.tree.isLeaf(revision)
            let newBody = document.newBodies[revision]
            guard before != after || wasLeaf != isLeaf || newBody != nil || closedBefore != closedNow else { return }
            // The imported mark stays with the body it describes: kept unless a body arrives now.
            let imported = document.importedIDs.contains(revision) ? importedKindFlag : 0
            let statement = try db.statement(
                """
                UPDATE revisions SET parent = ?1, kind = ?2 | iif(?3, kind & ?4, 0), leaf = ?5, body = coalesce(?6, body),
                    closed_child = ?10
                WHERE doc_key = ?7 AND generation = ?8 AND digest = ?9
                """)
            try statement.bind(digestOf: after.parent, at: 1)
            try statement.bind(Int(after.kind.rawValue) | imported, at: 2)
            try statement.bind(newBody != nil ? 0 : 1, at: 3)
            try statement.bind(importedKindFlag, at: 4)
            try statement.bind(isLeaf ? 1 : 0, at: 5)
            try statement.bind(newBody, at: 6)
            try statement.bind(key, at: 7)
            try statement.bind(generation, at: 8)
            try statement.bind(digestOf: revision, at: 9)
            try statement.bind(digestOf: closedNow, at: 10)
            try statement.run()
            try nameAttachments(db, body: newBody)
        }
    }
}
