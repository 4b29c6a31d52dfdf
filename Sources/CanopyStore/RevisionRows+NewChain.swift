import CanopyCore

extension RevisionRows {
    /// One row of `revisions` about to be inserted.
    struct RevisionRow {
        let node: RevTree.Node
        let isLeaf: Bool
        let body: [UInt8]?
        /// The revision's id is imported (not its content hash): stored as `importedKindFlag`.
        var importedID = false
        /// The revision's closing tombstone, when this row holds it (`closed_child`).
        var closedChild: RevisionID? = nil

        /// The value of the row's `kind` column.
        var kindColumn: Int { Int(node.kind.rawValue) | (importedID ? RevisionRows.importedKindFlag : 0) }
    }

    /// Writes a document that did not exist and receives one revision path: the commonest case of
    /// replication (an initial sync) and of local writes (a new document), taken without building
    /// a `RevTree`.
    ///
    /// The result is exactly what the general path (merge, policy, stem, persist) writes for the
    /// same input — a test checks that row for row: a single chain is never conflicted, its leaf is
    /// the current revision, ancestors named only by the path are recorded `.live` without a body,
    /// and stemming keeps the newest `revsLimit` revisions, the oldest kept one keeping its parent
    /// link as a fact.
    ///
    /// The document row is inserted with `ON CONFLICT DO NOTHING` instead of being looked up
    /// first: for a new document that is one statement instead of two. Returns nil, having written
    /// nothing, when the document exists; the caller then takes the general path.
    /// `NewChainBatch` writes the same rows for many documents with multi-row statements.
    static func insertNewChain(
        _ context: WriteContext, documentID: String, path: RevisionPath, body: [UInt8], importedID: Bool = false
    ) throws -> ForeignDocumentResult? {
        let leaf = RevTree.Node(id: path.leaf, parent: path.parent, kind: path.kind)
        let sequence = context.nextSequence()
        let statement = try context.db.statement(
            """
            INSERT INTO documents(sequence, current_generation, current_digest, deleted, conflicted, leaves, doc_id, doc_key, row_check)
            VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6, ?1, ?7) ON CONFLICT(doc_id) DO NOTHING
            """)
        var borrowed: [(index: Int32, value: Statement.Borrowed)] = []
        try bindNewDocument(statement, firstParameter: 1, sequence: sequence, leaf: leaf, documentID: documentID, borrowed: &borrowed)
        try statement.runBorrowing(borrowed)
        guard context.db.changes == 1 else {
            context.returnSequence(sequence)
            return nil
        }
        context.noteNewDocument(documentID, leaf: leaf)
        for row in newChainRows(path: path, body: body, importedID: importedID, revsLimit: context.revsLimit) {
            try insertRevisionRow(context.db, key: sequence, row: row)
        }
        return newChainResult(documentID: documentID, path: path)
    }

    /// Binds the integer values of a new document's row — its sequence (which is also its key),
    /// the leaf's generation and deleted flag, and its `RowCheck` — to parameters
    /// `firstParameter` … `firstParameter + 6`, in the order the INSERTs above list them, and appends the leaf's
    /// digest, its one-entry leaf list and the document id to `borrowed`, for
    /// `Statement.runBorrowing` to bind without a copy.
    static func bindNewDocument(
        _ statement: Statement, firstParameter first: Int32, sequence: Int64, leaf: RevTree.Node, documentID: String,
        borrowed: inout [(index: Int32, value: Statement.Borrowed)]
    ) throws(SQLiteError) {
        try statement.bind(sequence, at: first)
        try statement.bind(leaf.id.generation, at: first + 1)
        try statement.bind(leaf.kind.isDeleted ? 1 : 0, at: first + 3)
        try statement.bind(RowCheck.value(documentKey: sequence, leaf: leaf, documentID: documentID), at: first + 6)
        borrowed.append((first + 2, .digest(leaf.id)))
        borrowed.append((first + 4, .singleLeafList(leaf)))
        borrowed.append((first + 5, .text(documentID)))
    }

    /// The revision rows of a new document receiving `path`, oldest first (the order `persist`
    /// writes touched revisions in): the newest `revsLimit` revisions; the leaf has the body; the
    /// oldest row links to its parent when the path names one (stemmed, or `rootParent`).
    static func newChainRows(path: RevisionPath, body: [UInt8], importedID: Bool = false, revsLimit: Int) -> [RevisionRow] {
        var rows: [RevisionRow] = []
        rows.reserveCapacity(min(path.ancestors.count + 1, revsLimit))
        appendNewChainRows(path: path, body: body, importedID: importedID, revsLimit: revsLimit) { rows.append($0) }
        return rows
    }

    /// `newChainRows`, each row handed to `row` in turn instead of collected (no array per
    /// document on the batched path).
    static func appendNewChainRows(
        path: RevisionPath, body: [UInt8], importedID: Bool = false, revsLimit: Int, _ row: (RevisionRow) -> Void
    ) {
        let kept = min(path.ancestors.count + 1, revsLimit)
        // A closing tombstone whose parent gets a row is kept in that row, as `persist` keeps it.
        let leafInParentRow = kept > 1 && closedChildFitsParentRow(kind: path.kind, body: body, importedID: importedID)
        for index in stride(from: kept - 1, through: leafInParentRow ? 1 : 0, by: -1) {
            let id = index == 0 ? path.leaf : path.ancestors[index - 1]
            let parent = index < path.ancestors.count ? path.ancestors[index] : path.rootParent
            let node = RevTree.Node(id: id, parent: parent, kind: index == 0 ? path.kind : .live)
            row(RevisionRow(
                node: node, isLeaf: index == 0, body: index == 0 ? body : nil, importedID: index == 0 && importedID,
                closedChild: index == 1 && leafInParentRow ? path.leaf : nil))
        }
    }

    /// What a new document receiving `path` reports: every revision added, not conflicted.
    static func newChainResult(documentID: String, path: RevisionPath) -> ForeignDocumentResult {
        ForeignDocumentResult(documentID: documentID, newChain: path)
    }
}
