import CanopyCore

extension RevisionRows {
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
    static func insertNewChain(
        _ context: WriteContext, documentID: String, path: RevisionPath, body: [UInt8]
    ) throws -> ForeignDocumentResult? {
        let revisions = path.revisions
        let leaf = RevTree.Node(id: path.leaf, parent: path.parent, kind: path.kind)
        let sequence = context.nextSequence()
        let statement = try context.db.statement(
            """
            INSERT INTO documents(sequence, current_generation, current_digest, deleted, conflicted, leaves, doc_id, doc_key)
            VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6, ?1) ON CONFLICT(doc_id) DO NOTHING
            """)
        try statement.bind(sequence, at: 1)
        try statement.bind(leaf.id.generation, at: 2)
        try statement.bind(digestOf: leaf.id, at: 3)
        try statement.bind(leaf.kind.isDeleted ? 1 : 0, at: 4)
        try statement.bind(LeafList.encode([leaf]), at: 5)
        try statement.bind(documentID, at: 6)
        try statement.run()
        guard context.db.changes == 1 else {
            context.returnSequence(sequence)
            return nil
        }
        let key = sequence
        let kept = min(revisions.count, context.revsLimit)
        // Oldest first, as `persist` writes touched revisions in sorted (generation) order.
        for index in stride(from: kept - 1, through: 0, by: -1) {
            let parent = index + 1 < revisions.count ? revisions[index + 1] : path.rootParent
            let node = RevTree.Node(id: revisions[index], parent: parent, kind: index == 0 ? path.kind : .live)
            try insertRevisionRow(context.db, key: key, node: node, isLeaf: index == 0, body: index == 0 ? body : nil)
        }
        return ForeignDocumentResult(
            documentID: documentID, added: revisions.reversed(), resolution: .notConflicted, current: path.leaf,
            currentIsDeleted: path.kind.isDeleted)
    }
}
