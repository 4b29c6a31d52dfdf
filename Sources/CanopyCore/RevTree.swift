/// The revision tree of one document.
///
/// Data model (read this before the algorithms in `RevTree+Merge.swift` and
/// `RevTree+Stemming.swift`):
///
///     tree   := a set of nodes (a forest: stemming and partial histories leave several roots)
///     node   := (id: RevisionID, parent: RevisionID?, kind: RevisionKind)
///     parent := the id of the revision this one was made from; nil when unknown or for generation 1.
///               It may name a revision the tree no longer holds (stemmed) — it is still a fact.
///     leaf   := a node that no node of the tree names as its parent
///     open   := a leaf whose kind is not `.closed`; only open leaves take part in conflicts
///
/// Every fact in a tree is content-addressed (a revision id fixes its parent and kind), so merging
/// is a union of facts: idempotent and independent of order. The one wrinkle is that a path names
/// its ancestors' ids but not their kinds; an ancestor learned that way is recorded as `.live`, and
/// a path that names it as its leaf later supplies the real kind (`.live` is the lattice's bottom).
public struct RevTree: Sendable, Equatable {
    /// One revision of the tree.
    public struct Node: Sendable, Equatable, Hashable {
        /// The revision.
        public let id: RevisionID
        /// The revision it was made from; nil when unknown (partial history) or for generation 1.
        public internal(set) var parent: RevisionID?
        /// What the revision is.
        public internal(set) var kind: RevisionKind

        /// Creates a node.
        public init(id: RevisionID, parent: RevisionID?, kind: RevisionKind) {
            self.id = id
            self.parent = parent
            self.kind = kind
        }
    }

    private(set) var nodesByID: [RevisionID: Node] = [:]
    /// For every revision id named as a parent, how many nodes name it. A node is a leaf iff its id
    /// is absent here.
    private(set) var childCounts: [RevisionID: Int] = [:]

    /// An empty tree (a document that does not exist yet).
    public init() {}

    /// Rebuilds a tree from stored nodes. Nodes are taken as they are (no validation beyond
    /// de-duplication): this is for reading back what a tree once wrote.
    public init(nodes: some Sequence<Node>) {
        for node in nodes where nodesByID[node.id] == nil {
            nodesByID[node.id] = node
            if let parent = node.parent { childCounts[parent, default: 0] += 1 }
        }
    }

    /// Number of revisions held.
    public var count: Int { nodesByID.count }
    /// True when the tree holds no revision.
    public var isEmpty: Bool { nodesByID.isEmpty }

    /// All nodes, sorted by revision id (a deterministic order).
    public var sortedNodes: [Node] { nodesByID.values.sorted { $0.id < $1.id } }

    /// The node for `id`, if the tree holds it.
    public func node(_ id: RevisionID) -> Node? { nodesByID[id] }

    /// True if the tree holds `id`.
    public func contains(_ id: RevisionID) -> Bool { nodesByID[id] != nil }

    /// True if the tree holds `id` and no revision of the tree has it as parent.
    public func isLeaf(_ id: RevisionID) -> Bool { nodesByID[id] != nil && childCounts[id] == nil }

    /// All leaves in canonical order (`RevTree.canonicalOrder`): the current revision first.
    public var leaves: [Node] {
        nodesByID.values.filter { childCounts[$0.id] == nil }.sorted(by: RevTree.canonicalOrder)
    }

    /// Leaves that are not closing tombstones, in canonical order.
    public var openLeaves: [Node] { leaves.filter { !$0.kind.isClosed } }

    /// The current (display) revision: among open leaves, non-deleted before deleted, then higher
    /// generation, then higher digest (CouchDB's and PouchDB's order). If every leaf is closed
    /// (only possible with data written by other tools), the same order over all leaves.
    public var current: Node? {
        let all = leaves
        return all.first { !$0.kind.isClosed } ?? all.first
    }

    /// The open leaves that conflict: two or more live ones, or a deleted one beside a live one.
    /// Empty when the document is not conflicted.
    public var conflictingLeaves: [Node] {
        let open = openLeaves
        let live = open.filter { !$0.kind.isDeleted }.count
        let deleted = open.count - live
        return (live >= 2 || (live >= 1 && deleted >= 1)) ? open : []
    }

    /// True when the document is conflicted (`Protocol/design.md` §2.6).
    public var isConflicted: Bool { !conflictingLeaves.isEmpty }

    /// The revision and its ancestors the tree holds, newest first, at most `limit` of them.
    public func ancestry(of id: RevisionID, limit: Int = Int.max) -> [RevisionID] {
        var result: [RevisionID] = []
        var cursor = nodesByID[id]
        while let node = cursor, result.count < limit {
            result.append(node.id)
            cursor = node.parent.flatMap { nodesByID[$0] }
        }
        return result
    }

    /// The newest revision that is an ancestor of (or equal to) both `a` and `b`, if the tree still
    /// holds one.
    public func commonAncestor(_ a: RevisionID, _ b: RevisionID) -> RevisionID? {
        let ancestorsOfA = Set(ancestry(of: a))
        return ancestry(of: b).first { ancestorsOfA.contains($0) }
    }

    /// The newest revision that is an ancestor of every revision in `ids`, if the tree holds one.
    public func commonAncestor(of ids: [RevisionID]) -> RevisionID? {
        guard var result = ids.first else { return nil }
        for id in ids.dropFirst() {
            guard let common = commonAncestor(result, id) else { return nil }
            result = common
        }
        return result
    }

    /// CouchDB's order for leaves: non-deleted first, then higher generation, then higher digest.
    /// Returns true when `a` comes before `b`.
    public static func canonicalOrder(_ a: Node, _ b: Node) -> Bool {
        if a.kind.isDeleted != b.kind.isDeleted { return !a.kind.isDeleted }
        return a.id > b.id
    }

    /// Adds a local edit: `id` made from `parent` (nil for a document's first revision or a
    /// re-creation with no history). The parent must be a leaf the tree holds.
    public mutating func insertEdit(id: RevisionID, parent: RevisionID?, kind: RevisionKind) throws(RevTreeError) {
        guard id.generation == (parent?.generation ?? 0) + 1 else {
            throw .wrongGeneration(revision: id, parent: parent)
        }
        guard nodesByID[id] == nil else { throw .revisionExists(id) }
        if let parent {
            guard nodesByID[parent] != nil else { throw .unknownParent(parent) }
            guard childCounts[parent] == nil else { throw .parentNotLeaf(parent) }
        }
        add(Node(id: id, parent: parent, kind: kind))
    }

    /// Adds a node the tree does not hold yet, keeping the child counts.
    mutating func add(_ node: Node) {
        nodesByID[node.id] = node
        if let parent = node.parent { childCounts[parent, default: 0] += 1 }
    }

    /// Removes a node, keeping the child counts.
    mutating func remove(_ id: RevisionID) {
        guard let node = nodesByID.removeValue(forKey: id) else { return }
        if let parent = node.parent {
            let remaining = childCounts[parent, default: 1] - 1
            childCounts[parent] = remaining == 0 ? nil : remaining
        }
    }

    /// Records `parent` as the parent of the node `id`, which had none recorded.
    mutating func setParent(_ parent: RevisionID, of id: RevisionID) {
        nodesByID[id]?.parent = parent
        childCounts[parent, default: 0] += 1
    }

    /// Replaces the kind of the node `id`.
    mutating func setKind(_ kind: RevisionKind, of id: RevisionID) {
        nodesByID[id]?.kind = kind
    }
}
