/// Where this node's documents and a peer's differ, found by walking the digest tree together
/// (`Protocol/digests.md` §6): the asker starts at the root, and for each node it asked about
/// compares the peer's answer with its own documents under that node. Children that differ are
/// asked about next; a listed node is compared document by document.
///
/// Pure: the caller sends `toAsk` (at most `WireLimits.digestNodesMax` a message), hands each
/// answer to `receive` with this node's documents under the node, and is done when `toAsk` is
/// empty and no answer is outstanding. It stops asking once `differencesMax` differences are
/// found (`truncated`).
public struct DigestComparison: Sendable {
    /// A document that differs: its open leaves on each side, nil on the side that does not hold it.
    public struct Difference: Hashable, Sendable {
        public var id: String
        public var local: [DigestLeaf]?
        public var remote: [DigestLeaf]?

        public init(id: String, local: [DigestLeaf]?, remote: [DigestLeaf]?) {
            self.id = id
            self.local = local
            self.remote = remote
        }
    }

    /// The nodes still to ask the peer about, in tree order.
    public private(set) var toAsk: [DigestNodePath] = [.root]
    /// The differences found so far, in no order (`sortedDifferences` sorts them by id).
    public private(set) var differences: [Difference] = []
    /// Nodes answered by the peer so far.
    public private(set) var nodesCompared = 0
    /// True when the walk stopped at `differencesMax` differences: more may exist.
    public private(set) var truncated = false
    public let differencesMax: Int

    public init(differencesMax: Int) {
        self.differencesMax = max(1, differencesMax)
    }

    /// Takes the next nodes to ask about, at most `count`.
    public mutating func nextNodes(_ count: Int) -> [DigestNodePath] {
        let taken = Array(toAsk.prefix(count))
        toAsk.removeFirst(taken.count)
        return taken
    }

    /// Puts nodes a reply left unanswered back at the front of `toAsk`.
    public mutating func askFirst(_ nodes: [DigestNodePath]) {
        guard !truncated || differences.count < differencesMax else { return }
        toAsk.insert(contentsOf: nodes, at: 0)
    }

    /// The peer's answer for `path`, with this node's own documents under `path` (others are
    /// skipped) and, for a node whose children this node keeps (the root), its own children.
    public mutating func receive(
        _ answer: DigestNodeAnswer, for path: DigestNodePath, localChildren: [DigestChild]? = nil, localDocuments: [DigestDocument]
    ) {
        nodesCompared += 1
        let local = localDocuments.filter { path.contains($0.idHash) }
        switch answer {
        case .documents(let remote):
            compare(local: local, remote: remote)
        case .children(let remote):
            let mine = localChildren ?? DigestTree.children(of: path, from: local)
            let theirs = Dictionary(remote.map { ($0.index, $0) }, uniquingKeysWith: { first, _ in first })
            let ours = Dictionary(mine.map { ($0.index, $0) }, uniquingKeysWith: { first, _ in first })
            // A child the peer holds nothing under is asked about too: it answers with no
            // documents, and this node's documents there (read for that answer) are missing on it.
            for index in Set(theirs.keys).union(ours.keys).sorted() where theirs[index] != ours[index] {
                if let child = path.child(index) { toAsk.append(child) }
            }
        }
        if differences.count >= differencesMax {
            truncated = truncated || !toAsk.isEmpty || differences.count > differencesMax
            toAsk.removeAll()
            if differences.count > differencesMax {
                differences = Array(differences.sorted { $0.id < $1.id }.prefix(differencesMax))
            }
        }
    }

    /// The differences, by id.
    public var sortedDifferences: [Difference] { differences.sorted { $0.id < $1.id } }

    private mutating func compare(local: [DigestDocument], remote: [DigestDocument]) {
        let theirs = Dictionary(remote.map { ($0.id, $0.leaves) }, uniquingKeysWith: { first, _ in first })
        let ours = Dictionary(local.map { ($0.id, $0.leaves) }, uniquingKeysWith: { first, _ in first })
        for id in Set(theirs.keys).union(ours.keys) where theirs[id] != ours[id] {
            differences.append(Difference(id: id, local: ours[id], remote: theirs[id]))
        }
    }
}
