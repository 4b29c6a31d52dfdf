import CanopyCore

/// The reads replication makes for every document of a batch, each one statement: the
/// document's revision rows reached through its id in one join (the `doc_id` index probe, then
/// the range scan of the revisions primary key), with the bodies asked for read in the same scan.
/// `RevisionRows.load` takes two statements for the tree and `RevisionRows.body` one per body;
/// at tens of thousands of documents per second those statements were most of the sender's
/// SQLite time. Results equal the general path's (checked over random stores in the tests).
extension RevisionRows {
    /// A document's tree and the bodies of `wanted` as stored (a compacted body is absent from
    /// `bodies`). Nil when the document does not exist (or has no revision rows, which a store
    /// never writes).
    static func loadForSending(
        _ db: Database, documentID: String, wanted: [RevisionID]
    ) throws -> (tree: RevTree, bodies: [RevisionID: [UInt8]])? {
        let statement = try db.statement(
            """
            SELECT r.generation, r.digest, r.parent, r.kind, r.body
            FROM documents AS d CROSS JOIN revisions AS r ON r.doc_key = d.doc_key WHERE d.doc_id = ?
            """)
        defer { statement.reset() }
        try statement.bind(documentID, at: 1)
        var nodes: [RevTree.Node] = []
        var bodies: [RevisionID: [UInt8]] = [:]
        while try statement.step() {
            let node = try revisionNode(statement, documentID: documentID)
            nodes.append(node)
            // `wanted` is the peer's request for this document: almost always one revision.
            if wanted.contains(node.id), let body = statement.blob(4) { bodies[node.id] = body }
        }
        return nodes.isEmpty ? nil : (RevTree(nodes: nodes), bodies)
    }

    /// A document's tree, empty when the document does not exist.
    static func loadTree(_ db: Database, documentID: String) throws -> RevTree {
        let statement = try db.statement(
            """
            SELECT r.generation, r.digest, r.parent, r.kind
            FROM documents AS d CROSS JOIN revisions AS r ON r.doc_key = d.doc_key WHERE d.doc_id = ?
            """)
        defer { statement.reset() }
        try statement.bind(documentID, at: 1)
        var nodes: [RevTree.Node] = []
        while try statement.step() { nodes.append(try revisionNode(statement, documentID: documentID)) }
        return nodes.isEmpty ? RevTree() : RevTree(nodes: nodes)
    }
}
