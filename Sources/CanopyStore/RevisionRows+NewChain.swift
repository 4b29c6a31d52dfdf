import CanopyCore

extension RevisionRows {
    /// Writes a document that did not exist and receives one revision path: the commonest case of
    /// replication (an initial sync), taken without building a `RevTree`.
    ///
    /// The result is exactly what the general path (merge, policy, stem, persist) writes for the
    /// same input — a test checks that row for row: a single chain is never conflicted, its leaf is
    /// the current revision, ancestors named only by the path are recorded `.live` without a body,
    /// and stemming keeps the newest `revsLimit` revisions, the oldest kept one keeping its parent
    /// link as a fact.
    static func insertNewChain(
        _ context: WriteContext, documentID: String, path: RevisionPath, body: [UInt8]
    ) throws -> ForeignDocumentResult {
        var document = StoredDocument(id: documentID, key: nil, sequence: nil, tree: RevTree())
        let revisions = path.revisions
        let leaf = RevTree.Node(id: path.leaf, parent: path.ancestors.first, kind: path.kind)
        let key = try writeDocumentRow(context, &document, current: leaf, conflicted: false, leaves: [leaf])
        let kept = min(revisions.count, context.revsLimit)
        // Oldest first, as `persist` writes touched revisions in sorted (generation) order.
        for index in stride(from: kept - 1, through: 0, by: -1) {
            let parent = index + 1 < revisions.count ? revisions[index + 1] : nil
            let node = RevTree.Node(id: revisions[index], parent: parent, kind: index == 0 ? path.kind : .live)
            try insertRevisionRow(context.db, key: key, node: node, isLeaf: index == 0, body: index == 0 ? body : nil)
        }
        return ForeignDocumentResult(
            documentID: documentID, added: revisions.reversed(), resolution: .notConflicted, current: path.leaf,
            currentIsDeleted: path.kind.isDeleted)
    }
}
