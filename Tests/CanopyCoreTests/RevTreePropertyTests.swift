import Testing
@testable import CanopyCore

/// Random revision histories for property tests. A history is the "true" tree of a document on
/// an imaginary node that saw every edit; the paths it yields are what peers would send.
struct RandomHistory {
    var nodes: [RevTree.Node] = []

    /// Grows a random forest of `size` revisions: a few roots, then children of random nodes.
    init(size: Int, generator: inout SplitMix64) {
        let kinds: [RevisionKind] = [.live, .live, .live, .deleted, .closed, .resolvedLive]
        for _ in 0..<size {
            let parent: RevTree.Node? = nodes.isEmpty || generator.chance(1, in: 12) ? nil : nodes[generator.index(below: nodes.count)]
            let generation = (parent?.id.generation ?? 0) + 1
            let id = RevisionID(generation: generation, digestHigh: generator.next(), digestLow: generator.next())
            nodes.append(RevTree.Node(id: id, parent: parent?.id, kind: kinds[generator.index(below: kinds.count)]))
        }
    }

    /// Paths a peer could send: every revision with its full ancestry, and random truncations.
    func paths(generator: inout SplitMix64) throws -> [RevisionPath] {
        let byID = Dictionary(uniqueKeysWithValues: nodes.map { ($0.id, $0) })
        var result: [RevisionPath] = []
        for node in nodes {
            var ancestors: [RevisionID] = []
            var cursor = node.parent.flatMap { byID[$0] }
            while let ancestor = cursor {
                ancestors.append(ancestor.id)
                cursor = ancestor.parent.flatMap { byID[$0] }
            }
            result.append(try RevisionPath(leaf: node.id, kind: node.kind, ancestors: ancestors))
            if !ancestors.isEmpty {
                let cut = generator.index(below: ancestors.count)
                // Half the cut paths name the link below the cut, as a sender that knows it does.
                let link = generator.chance(1, in: 2) ? ancestors[cut] : nil
                result.append(try RevisionPath(
                    leaf: node.id, kind: node.kind, ancestors: Array(ancestors.prefix(cut)), rootParent: link))
            }
        }
        return result
    }
}

@Suite("Revision tree properties")
struct RevTreePropertyTests {
    @Test("merging the same paths in any order, any number of times, gives the same tree", arguments: 0..<60)
    func orderIndependent(seed: UInt64) throws {
        var generator = SplitMix64(seed: seed)
        let history = RandomHistory(size: 1 + generator.index(below: 40), generator: &generator)
        let paths = try history.paths(generator: &generator)
        var reference = RevTree()
        for path in paths { try reference.merge(path) }
        for _ in 0..<4 {
            var tree = RevTree()
            for path in generator.shuffled(paths + paths.prefix(generator.index(below: paths.count + 1))) {
                try tree.merge(path)
            }
            #expect(tree == reference)
        }
        // Idempotent: merging everything again changes nothing.
        var again = reference
        for path in paths { try again.merge(path) }
        #expect(again == reference)
        // The merged tree holds exactly the history, with the true parents and kinds.
        #expect(Set(reference.sortedNodes) == Set(history.nodes))
    }

    @Test("two nodes that each merge half the paths and then swap converge to the same tree", arguments: 0..<30)
    func twoNodesConverge(seed: UInt64) throws {
        var generator = SplitMix64(seed: 1000 + seed)
        let history = RandomHistory(size: 2 + generator.index(below: 30), generator: &generator)
        let paths = generator.shuffled(try history.paths(generator: &generator))
        let split = paths.count / 2
        var a = RevTree()
        var b = RevTree()
        for path in paths[..<split] { try a.merge(path) }
        for path in paths[split...] { try b.merge(path) }
        for path in paths[split...] { try a.merge(path) }
        for path in paths[..<split] { try b.merge(path) }
        #expect(a == b)
        #expect(a.current == b.current)
        #expect(a.openLeaves == b.openLeaves)
    }

    @Test("stemming keeps every leaf, revsLimit revisions of each leaf's path, and nothing farther from every leaf", arguments: 0..<30)
    func stemmingBounds(seed: UInt64) throws {
        var generator = SplitMix64(seed: 5000 + seed)
        let history = RandomHistory(size: 5 + generator.index(below: 60), generator: &generator)
        var tree = RevTree()
        for path in try history.paths(generator: &generator) { try tree.merge(path) }
        let leavesBefore = tree.leaves
        let limit = 1 + generator.index(below: 6)
        var stemmed = tree
        let removed = stemmed.stem(limit: limit)
        #expect(stemmed.leaves == leavesBefore)
        #expect(stemmed.count + removed.count == tree.count)
        var nearSomeLeaf = Set<RevisionID>()
        for leaf in stemmed.leaves {
            let original = tree.ancestry(of: leaf.id)
            #expect(stemmed.ancestry(of: leaf.id).count >= min(limit, original.count))
            nearSomeLeaf.formUnion(original.prefix(limit))
        }
        #expect(Set(stemmed.sortedNodes.map(\.id)) == nearSomeLeaf)
        var twice = stemmed
        #expect(twice.stem(limit: limit).isEmpty)
        #expect(twice == stemmed)
    }

    @Test("a tree answers node, isLeaf and leaves as its node list says, small or indexed, through merges, edits and stems", arguments: 0..<40)
    func queriesMatchNodeList(seed: UInt64) throws {
        var generator = SplitMix64(seed: seed)
        let history = RandomHistory(size: 1 + generator.index(below: 3 * RevTree.indexedCountMin), generator: &generator)
        var tree = RevTree()
        for path in generator.shuffled(try history.paths(generator: &generator)) {
            try tree.merge(path)
            if generator.chance(1, in: 8) { tree.stem(limit: 1 + generator.index(below: 6)) }
            if generator.chance(1, in: 4), let leaf = tree.leaves.first {
                let child = RevisionID(generation: leaf.id.generation + 1, digestHigh: generator.next(), digestLow: generator.next())
                try tree.insertEdit(id: child, parent: leaf.id, kind: .live)
            }
            let nodes = tree.sortedNodes
            let parents = Set(nodes.compactMap(\.parent))
            #expect(tree.count == nodes.count)
            #expect(Set(nodes.map(\.id)).count == nodes.count)
            for node in nodes {
                #expect(tree.node(node.id) == node)
                #expect(tree.isLeaf(node.id) == !parents.contains(node.id))
            }
            #expect(tree.leaves == nodes.filter { !parents.contains($0.id) }.sorted(by: RevTree.canonicalOrder))
            #expect(tree == RevTree(nodes: generator.shuffled(nodes)))
        }
    }
}
