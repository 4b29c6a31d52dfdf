import CanopyCore

/// A document as `revisionsToSend` reads it: its revisions and the stored bodies of those the
/// peer asked for (a compacted body is absent). Most documents hold a single revision (written
/// once, then replicated); those build no `RevTree` or dictionary: per document, hashing them into
/// a tree and a body map was a third of the sender's read path.
enum SendingDocument {
    /// The document's only revision and its body.
    case single(RevTree.Node, body: [UInt8]?)
    /// A document with several revisions.
    case tree(RevTree, bodies: [RevisionID: [UInt8]])

    /// The node of `revision`, if the document holds it.
    func node(_ revision: RevisionID) -> RevTree.Node? {
        switch self {
        case .single(let node, _): return node.id == revision ? node : nil
        case .tree(let tree, _): return tree.node(revision)
        }
    }

    /// `revision` and the ancestors the document holds, newest first, at most `limit` of them
    /// (`RevTree.ancestry`).
    func ancestry(of revision: RevisionID, limit: Int) -> [RevisionID] {
        switch self {
        case .single(let node, _): return node.id == revision && limit > 0 ? [revision] : []
        case .tree(let tree, _): return tree.ancestry(of: revision, limit: limit)
        }
    }

    /// The stored body of `revision` if it was asked for and not compacted away.
    func body(_ revision: RevisionID) -> [UInt8]? {
        switch self {
        case .single(let node, let body): return node.id == revision ? body : nil
        case .tree(_, let bodies): return bodies[revision]
        }
    }
}

/// The reads replication makes for every document of a batch, each one statement: the
/// document's revision rows reached through its id in one join (the `doc_id` index probe, then
/// the range scan of the revisions primary key), with the bodies asked for read in the same scan.
/// `RevisionRows.load` takes two statements for the tree and `RevisionRows.body` one per body;
/// at tens of thousands of documents per second those statements were most of the sender's
/// SQLite time. Results equal the general path's (checked over random stores in the tests).
extension RevisionRows {
    /// A document's revisions and the stored bodies of `wanted`. Nil when the document does not
    /// exist (or has no revision rows, which a store never writes).
    static func loadForSending(_ db: Database, documentID: String, wanted: [RevisionID]) throws -> SendingDocument? {
        let statement = try db.statement(
            """
            SELECT r.generation, r.digest, r.parent, r.kind, r.body
            FROM documents AS d CROSS JOIN revisions AS r ON r.doc_key = d.doc_key WHERE d.doc_id = ?
            """)
        defer { statement.reset() }
        try statement.bind(documentID, at: 1)
        guard try statement.step() else { return nil }
        // `wanted` is the peer's request for this document: almost always one revision.
        var node = try revisionNode(statement, documentID: documentID)
        var body = wanted.contains(node.id) ? statement.blob(4) : nil
        guard try statement.step() else { return .single(node, body: body) }
        var nodes = [node]
        var bodies: [RevisionID: [UInt8]] = [:]
        if let body { bodies[node.id] = body }
        repeat {
            node = try revisionNode(statement, documentID: documentID)
            nodes.append(node)
            body = wanted.contains(node.id) ? statement.blob(4) : nil
            if let body { bodies[node.id] = body }
        } while try statement.step()
        return .tree(RevTree(nodes: nodes), bodies: bodies)
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
