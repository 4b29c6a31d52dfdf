import Testing
@testable import CanopyCore

@Suite("Conflict resolution")
struct ConflictResolutionTests {
    private func body(_ text: String) throws -> JSONValue { try JSONValue.parse(text) }

    /// A document edited concurrently from a common base: returns the tree and the leaves' bodies.
    private func conflicted(_ edits: [(body: String, kind: RevisionKind, length: Int)]) throws -> (RevTree, [RevisionID: JSONValue], [RevisionID]) {
        var tree = RevTree()
        let baseBody = try body(#"{"title":"base","n":1,"tags":{"a":1}}"#)
        let base = RevisionHasher.revisionID(parent: nil, kind: .live, body: baseBody)
        try tree.insertEdit(id: base, parent: nil, kind: .live)
        var bodies: [RevisionID: JSONValue] = [base: baseBody]
        var leaves: [RevisionID] = []
        for edit in edits {
            var parent = base
            for step in 0..<edit.length {
                let last = step == edit.length - 1
                let content = last ? try body(edit.body) : .object(["step": .int(Int64(step)), "of": .string(edit.body)])
                let kind: RevisionKind = last ? edit.kind : .live
                let id = RevisionHasher.revisionID(parent: parent, kind: kind, body: content)
                var path = try RevisionPath(leaf: id, kind: kind, ancestors: tree.ancestry(of: parent))
                if tree.contains(id) { path = try RevisionPath(leaf: id, kind: kind) }
                try tree.merge(path)
                bodies[id] = content
                parent = id
            }
            leaves.append(parent)
        }
        return (tree, bodies, leaves)
    }

    @Test("an edit against a delete: the deletion wins and the edit's branch is closed")
    func deleteWins() throws {
        var (tree, bodies, leaves) = try conflicted([(#"{"title":"edited"}"#, .live, 3), ("{}", .deleted, 1)])
        let decision = try #require(ConflictResolution.automaticDecision(for: tree))
        #expect(decision == .keep(leaves[1]))
        let plan = try ConflictResolution.plan(decision, tree: tree, bodies: bodies)
        #expect(plan == [ConflictResolution.closing(leaves[0])])
        try tree.apply(plan)
        #expect(!tree.isConflicted)
        #expect(tree.current?.id == leaves[1])
        #expect(tree.current?.kind == .deleted)
        bodies.removeAll()
    }

    @Test("the longer edit chain wins; equal chains go to the higher digest")
    func mostRevisionsWin() throws {
        let (tree, _, leaves) = try conflicted([(#"{"v":"long"}"#, .live, 4), (#"{"v":"short"}"#, .live, 1)])
        #expect(ConflictResolution.automaticDecision(for: tree) == .keep(leaves[0]))
        let (tied, _, tiedLeaves) = try conflicted([(#"{"v":"x"}"#, .live, 2), (#"{"v":"y"}"#, .live, 2)])
        #expect(ConflictResolution.automaticDecision(for: tied) == .keep(tiedLeaves.max()!))
    }

    @Test("two nodes that settle the same conflict write identical revisions")
    func deterministic() throws {
        let (tree, bodies, _) = try conflicted([(#"{"v":1}"#, .live, 2), (#"{"v":2}"#, .live, 3), (#"{"v":3}"#, .live, 1)])
        var nodeA = tree
        var nodeB = RevTree(nodes: tree.sortedNodes.reversed())
        let decision = try #require(ConflictResolution.automaticDecision(for: nodeB))
        try nodeA.apply(ConflictResolution.plan(decision, tree: nodeA, bodies: bodies))
        try nodeB.apply(ConflictResolution.plan(decision, tree: nodeB, bodies: bodies))
        #expect(nodeA == nodeB)
        #expect(!nodeA.isConflicted)
        let merged = JSONValue.object(["v": .int(9)])
        var mergeA = tree
        var mergeB = tree
        try mergeA.apply(ConflictResolution.plan(.merged(merged), tree: mergeA, bodies: bodies))
        try mergeB.apply(ConflictResolution.plan(.merged(merged), tree: mergeB, bodies: bodies))
        #expect(mergeA == mergeB)
        #expect(mergeA.current?.kind == .resolvedLive)
        #expect(mergeA.current?.id.generation == 5)
    }

    @Test("resolvers that disagree cost one round: the automatic rule settles their outputs")
    func disagreementConverges() throws {
        let (tree, bodies, leaves) = try conflicted([(#"{"v":"a"}"#, .live, 2), (#"{"v":"b"}"#, .live, 2), (#"{"v":"c"}"#, .live, 2)])
        let winner = try #require(ConflictResolution.automaticWinner(of: tree)).id
        let others = leaves.filter { $0 != winner }
        var nodeA = tree
        var nodeB = tree
        try nodeA.apply(ConflictResolution.plan(.keep(others[0]), tree: nodeA, bodies: bodies))
        try nodeB.apply(ConflictResolution.plan(.keep(others[1]), tree: nodeB, bodies: bodies))
        // Exchange: each merges the other's new leaves with their ancestry.
        var union = nodeA
        for leaf in nodeB.leaves {
            try union.merge(RevisionPath(leaf: leaf.id, kind: leaf.kind, ancestors: Array(nodeB.ancestry(of: leaf.id).dropFirst())))
        }
        #expect(union.isConflicted)
        #expect(!ConflictResolution.needsResolver(union))
        var settledA = union
        var settledB = RevTree(nodes: union.sortedNodes)
        let decision = try #require(ConflictResolution.automaticDecision(for: settledA))
        try settledA.apply(ConflictResolution.plan(decision, tree: settledA, bodies: [:]))
        try settledB.apply(ConflictResolution.plan(decision, tree: settledB, bodies: [:]))
        #expect(settledA == settledB)
        #expect(!settledA.isConflicted)
    }

    @Test("a deletion below where a live leaf's history was stemmed may be its ancestor: it does not win, and the node holding the whole history, which sees no conflict, converges with the node that closed it")
    func stemmedHistoryDeletion() throws {
        // The whole history: 1 → 2 (deleted) → 3 … 8 (written on top of the deletion).
        var whole = RevTree()
        var chain: [RevisionID] = []
        var parent: RevisionID? = nil
        for generation in 1...8 {
            let kind: RevisionKind = generation == 2 ? .deleted : .live
            let id = RevisionHasher.revisionID(parent: parent, kind: kind, body: .object(["g": .int(Int64(generation))]))
            try whole.insertEdit(id: id, parent: parent, kind: kind)
            chain.append(id)
            parent = id
        }
        #expect(!whole.isConflicted)
        #expect(whole.stemmedGeneration(of: chain[7]) == nil)

        // A node that kept 5 … 8 only, and got the old deletion back as a leaf of its own.
        var stemmed = RevTree()
        try stemmed.merge(try RevisionPath(leaf: chain[7], kind: .live, ancestors: [chain[6], chain[5], chain[4]], rootParent: chain[3]))
        try stemmed.merge(try RevisionPath(leaf: chain[1], kind: .deleted, ancestors: [chain[0]]))
        #expect(stemmed.stemmedGeneration(of: chain[7]) == 5)
        #expect(stemmed.stemmedGeneration(of: chain[1]) == nil)
        #expect(stemmed.conflictingLeaves.map(\.id).sorted() == [chain[1], chain[7]])
        #expect(ConflictResolution.automaticWinner(of: stemmed)?.id == chain[7], "the deletion may be 8's ancestor")
        let plan = try ConflictResolution.plan(try #require(ConflictResolution.automaticDecision(for: stemmed)), tree: stemmed, bodies: [:])
        #expect(plan == [ConflictResolution.closing(chain[1])])
        try stemmed.apply(plan)
        #expect(stemmed.current?.id == chain[7] && !stemmed.isConflicted)
        // The tombstone reaches the node with the whole history as a closed branch of 2.
        try whole.merge(try RevisionPath(leaf: plan[0].id, kind: .closed, ancestors: [chain[1], chain[0]]))
        #expect(whole.current?.id == chain[7] && !whole.isConflicted)
        #expect(whole.openLeaves.map(\.id) == stemmed.openLeaves.map(\.id))

        // A deletion at or above the cut is not in the missing history: it is concurrent and wins.
        var concurrent = stemmed
        let deletion = RevisionHasher.revisionID(parent: chain[5], kind: .deleted, body: .object([:]))
        try concurrent.merge(try RevisionPath(leaf: deletion, kind: .deleted, ancestors: [chain[5], chain[4]], rootParent: chain[3]))
        #expect(deletion.generation == 7)
        #expect(ConflictResolution.automaticWinner(of: concurrent)?.id == deletion)
    }

    @Test("keeping a losing leaf writes its body under the automatic winner and closes the rest")
    func keepLoser() throws {
        var (tree, bodies, leaves) = try conflicted([(#"{"v":"long"}"#, .live, 3), (#"{"v":"short"}"#, .live, 1)])
        let plan = try ConflictResolution.plan(.keep(leaves[1]), tree: tree, bodies: bodies)
        #expect(plan.count == 2)
        #expect(plan[0] == ConflictResolution.closing(leaves[1]))
        #expect(plan[1].parent == leaves[0] && plan[1].body == bodies[leaves[1]] && plan[1].kind == .resolvedLive)
        try tree.apply(plan)
        #expect(tree.current?.id == plan[1].id)
        #expect(throws: ConflictResolution.PlanError.notConflicted) { try ConflictResolution.plan(.delete, tree: tree, bodies: bodies) }
    }

    @Test("a decision that keeps a revision that is not a conflicting leaf is refused")
    func badDecision() throws {
        let (tree, bodies, _) = try conflicted([(#"{"v":1}"#, .live, 2), (#"{"v":2}"#, .live, 2)])
        #expect(throws: ConflictResolution.PlanError.notAConflictingLeaf(rev(9, 9))) {
            try ConflictResolution.plan(.keep(rev(9, 9)), tree: tree, bodies: bodies)
        }
    }

    @Test("mergeJSON merges fields changed on one side and lets the winner decide the rest")
    func mergeJSON() throws {
        let ancestor = try body(#"{"a":1,"b":1,"c":1,"gone":true,"nested":{"x":1,"y":1}}"#)
        let leafA = ConflictLeaf(revision: rev(3, 0xa), kind: .live, body: try body(#"{"a":2,"b":1,"c":5,"gone":true,"nested":{"x":2,"y":1}}"#))
        let leafB = ConflictLeaf(revision: rev(3, 0xb), kind: .live, body: try body(#"{"a":1,"b":3,"c":6,"d":4,"nested":{"x":1,"y":3}}"#))
        let conflict = Conflict(documentID: "doc", leaves: [leafB, leafA], commonAncestorBody: ancestor, localRevision: leafA.revision)
        let decision = try BuiltInResolver.mergeJSON.resolve(conflict)
        #expect(decision == .merged(try body(#"{"a":2,"b":3,"c":6,"d":4,"nested":{"x":2,"y":3}}"#)))
        let swapped = Conflict(documentID: "doc", leaves: [leafA, leafB], commonAncestorBody: ancestor, localRevision: leafB.revision)
        #expect(try BuiltInResolver.mergeJSON.resolve(swapped) == decision)
        let withDeletion = Conflict(documentID: "doc", leaves: [leafA, ConflictLeaf(revision: rev(2, 1), kind: .deleted, body: nil)], commonAncestorBody: nil, localRevision: nil)
        #expect(try BuiltInResolver.mergeJSON.resolve(withDeletion) == .delete)
    }

    @Test("localWins keeps the node's own revision and remoteWins the other one")
    func localAndRemote() throws {
        let leaves = [ConflictLeaf(revision: rev(3, 0xb), kind: .live, body: .emptyObject), ConflictLeaf(revision: rev(3, 0xa), kind: .live, body: .emptyObject)]
        let conflict = Conflict(documentID: "doc", leaves: leaves, commonAncestorBody: nil, localRevision: rev(3, 0xa))
        #expect(try BuiltInResolver.localWins.resolve(conflict) == .keep(rev(3, 0xa)))
        #expect(try BuiltInResolver.remoteWins.resolve(conflict) == .keep(rev(3, 0xb)))
    }
}
