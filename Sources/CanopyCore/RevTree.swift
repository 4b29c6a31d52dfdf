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

    /// A node and how many nodes of the tree name it as their parent (0: a leaf).
    private struct Entry: Sendable {
        var node: Node
        var children: Int
    }

    /// The nodes, in no particular order: nothing read from a tree depends on it (every list a
    /// tree hands out is sorted). Most trees hold a handful of nodes, which a scan finds sooner
    /// than a hash lookup; past `indexedCountMin` nodes `index` is kept as well.
    private var entries: [Entry] = []
    /// Kept once the tree has held `indexedCountMin` nodes, nil before: where each id is in
    /// `entries`, and for every id named as a parent how many nodes name it (whether or not the
    /// tree holds that parent).
    private var index: Index?

    private struct Index: Sendable {
        var positions: [RevisionID: Int] = [:]
        var childCounts: [RevisionID: Int] = [:]
    }

    /// The size from which a tree keeps `index`.
    static let indexedCountMin = 16

    /// An empty tree (a document that does not exist yet).
    public init() {}

    /// Rebuilds a tree from stored nodes. Nodes are taken as they are (no validation beyond
    /// de-duplication): this is for reading back what a tree once wrote.
    public init(nodes: some Sequence<Node>) {
        entries.reserveCapacity(nodes.underestimatedCount)
        for node in nodes where position(of: node.id) == nil { add(node) }
    }

    /// Number of revisions held.
    public var count: Int { entries.count }
    /// True when the tree holds no revision.
    public var isEmpty: Bool { entries.isEmpty }

    /// All nodes, sorted by revision id (a deterministic order).
    public var sortedNodes: [Node] { entries.map(\.node).sorted { $0.id < $1.id } }

    /// The node for `id`, if the tree holds it.
    public func node(_ id: RevisionID) -> Node? { position(of: id).map { entries[$0].node } }

    /// True if the tree holds `id`.
    public func contains(_ id: RevisionID) -> Bool { position(of: id) != nil }

    /// True if the tree holds `id` and no revision of the tree has it as parent.
    public func isLeaf(_ id: RevisionID) -> Bool { position(of: id).map { entries[$0].children == 0 } ?? false }

    /// All leaves in canonical order (`RevTree.canonicalOrder`): the current revision first.
    public var leaves: [Node] {
        var result: [Node] = []
        for entry in entries where entry.children == 0 { result.append(entry.node) }
        if result.count > 1 { result.sort(by: RevTree.canonicalOrder) }
        return result
    }

    /// Leaves that are not closing tombstones, in canonical order.
    public var openLeaves: [Node] { leaves.filter { !$0.kind.isClosed } }

    /// The current (display) revision: among open leaves, non-deleted before deleted, then higher
    /// generation, then higher digest (CouchDB's and PouchDB's order). If every leaf is closed
    /// (only possible with data written by other tools), the same order over all leaves.
    public var current: Node? { Self.current(amongLeaves: leaves) }

    /// `current` for a tree whose `leaves` are `leaves`.
    public static func current(amongLeaves leaves: [Node]) -> Node? {
        leaves.first { !$0.kind.isClosed } ?? leaves.first
    }

    /// The open leaves that conflict: two or more live ones, or a deleted one beside a live one.
    /// Empty when the document is not conflicted.
    public var conflictingLeaves: [Node] { Self.conflicting(amongLeaves: leaves) }

    /// `conflictingLeaves` for a tree whose `leaves` are `leaves`.
    public static func conflicting(amongLeaves leaves: [Node]) -> [Node] {
        let open = leaves.filter { !$0.kind.isClosed }
        let live = open.filter { !$0.kind.isDeleted }.count
        let deleted = open.count - live
        return (live >= 2 || (live >= 1 && deleted >= 1)) ? open : []
    }

    /// True when the document is conflicted (`Protocol/design.md` §2.6).
    public var isConflicted: Bool { !conflictingLeaves.isEmpty }

    /// Where `id` is in `entries`.
    private func position(of id: RevisionID) -> Int? {
        if let index { return index.positions[id] }
        return entries.firstIndex { $0.node.id == id }
    }

    public static func == (left: RevTree, right: RevTree) -> Bool {
        guard left.entries.count == right.entries.count else { return false }
        return left.entries.allSatisfy { right.node($0.node.id) == $0.node }
    }

    /// The revision and its ancestors the tree holds, newest first, at most `limit` of them.
    public func ancestry(of id: RevisionID, limit: Int = Int.max) -> [RevisionID] {
        var result: [RevisionID] = []
        var cursor = node(id)
        while let found = cursor, result.count < limit {
            result.append(found.id)
            cursor = found.parent.flatMap { node($0) }
        }
        return result
    }

    /// The generation of the oldest revision the tree holds of `id`'s history when the history
    /// goes on below it (its parent was stemmed away by the revs limit); nil when the tree holds
    /// the history down to a first revision, or does not hold `id`.
    public func stemmedGeneration(of id: RevisionID) -> Int? {
        var cursor = node(id)
        while let found = cursor {
            guard let parent = found.parent else { return nil }
            guard let next = node(parent) else { return found.id.generation }
            cursor = next
        }
        return nil
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
        guard position(of: id) == nil else { throw .revisionExists(id) }
        if let parent {
            guard let found = position(of: parent) else { throw .unknownParent(parent) }
            guard entries[found].children == 0 else { throw .parentNotLeaf(parent) }
        }
        add(Node(id: id, parent: parent, kind: kind))
    }

    /// The number of nodes of the tree whose parent is `id`.
    private func childCount(of id: RevisionID) -> Int {
        if let index { return index.childCounts[id] ?? 0 }
        var count = 0
        for entry in entries where entry.node.parent == id { count += 1 }
        return count
    }

    /// Adds a node the tree does not hold yet, keeping the child counts.
    mutating func add(_ node: Node) {
        entries.append(Entry(node: node, children: childCount(of: node.id)))
        if index == nil && entries.count >= Self.indexedCountMin {
            var built = Index()
            built.positions.reserveCapacity(entries.count * 2)
            for (position, entry) in entries.enumerated() {
                built.positions[entry.node.id] = position
                if let parent = entry.node.parent { built.childCounts[parent, default: 0] += 1 }
            }
            index = built
        } else if index != nil {
            index!.positions[node.id] = entries.count - 1
            if let parent = node.parent { index!.childCounts[parent, default: 0] += 1 }
        }
        if let parent = node.parent, let found = position(of: parent) { entries[found].children += 1 }
    }

    /// Removes a node, keeping the child counts.
    mutating func remove(_ id: RevisionID) {
        guard let removed = position(of: id) else { return }
        let node = entries[removed].node
        let last = entries.count - 1
        if removed != last {
            entries.swapAt(removed, last)
            index?.positions[entries[removed].node.id] = removed
        }
        entries.removeLast()
        index?.positions[id] = nil
        if let parent = node.parent {
            if index != nil {
                let remaining = index!.childCounts[parent, default: 1] - 1
                index!.childCounts[parent] = remaining == 0 ? nil : remaining
            }
            if let found = position(of: parent) { entries[found].children -= 1 }
        }
    }

    /// Records `parent` as the parent of the node `id`, which had none recorded.
    mutating func setParent(_ parent: RevisionID, of id: RevisionID) {
        guard let found = position(of: id) else { return }
        entries[found].node.parent = parent
        index?.childCounts[parent, default: 0] += 1
        if let parentPosition = position(of: parent) { entries[parentPosition].children += 1 }
    }

    /// Replaces the kind of the node `id`.
    mutating func setKind(_ kind: RevisionKind, of id: RevisionID) {
        guard let found = position(of: id) else { return }
        entries[found].node.kind = kind
    }
}
