import Testing
@testable import CanopyCore

/// A revision id with a readable digest: generation `g`, digest `tag` (high half) and 0.
func rev(_ g: Int, _ tag: UInt64) -> RevisionID {
    RevisionID(generation: g, digestHigh: tag, digestLow: 0)
}

/// A path from ids newest first.
func path(_ ids: RevisionID..., kind: RevisionKind = .live) throws -> RevisionPath {
    try RevisionPath(leaf: ids[0], kind: kind, ancestors: Array(ids.dropFirst()))
}

@Suite("Revision trees")
struct RevTreeTests {
    /// 1-a → 2-b
    private func linear() throws -> RevTree {
        var tree = RevTree()
        try tree.merge(path(rev(2, 0xb), rev(1, 0xa)))
        return tree
    }

    @Test("a path that extends a leaf makes a new leaf, not a conflict")
    func newLeaf() throws {
        var tree = try linear()
        let outcome = try tree.merge(path(rev(3, 0xc), rev(2, 0xb)))
        #expect(outcome.added == [rev(3, 0xc)])
        #expect(tree.leaves.map(\.id) == [rev(3, 0xc)])
        #expect(!tree.isConflicted)
        #expect(tree.current?.id == rev(3, 0xc))
    }

    @Test("a path that forks from an ancestor makes a new branch and a conflict")
    func newBranch() throws {
        var tree = try linear()
        try tree.merge(path(rev(2, 0xf), rev(1, 0xa)))
        #expect(tree.leaves.map(\.id) == [rev(2, 0xf), rev(2, 0xb)])
        #expect(tree.isConflicted)
        #expect(tree.current?.id == rev(2, 0xf))
    }

    @Test("a path that reaches below a stemmed tree reconnects it")
    func extendsStemmedTree() throws {
        var tree = RevTree()
        try tree.merge(path(rev(4, 0xd), rev(3, 0xc)))
        #expect(tree.node(rev(3, 0xc))?.parent == nil)
        try tree.merge(path(rev(6, 0xf), rev(5, 0xe), rev(4, 0xd), rev(3, 0xc), rev(2, 0xb), rev(1, 0xa)))
        #expect(tree.count == 6)
        #expect(tree.node(rev(3, 0xc))?.parent == rev(2, 0xb))
        #expect(tree.leaves.map(\.id) == [rev(6, 0xf)])
        #expect(tree.ancestry(of: rev(6, 0xf)).count == 6)
    }

    @Test("a path whose root is unknown starts a new root until a later path links it")
    func unknownRoot() throws {
        var tree = try linear()
        try tree.merge(path(rev(4, 0xd), rev(3, 0xc)))
        #expect(tree.leaves.map(\.id) == [rev(4, 0xd), rev(2, 0xb)])
        #expect(tree.isConflicted)
        try tree.merge(path(rev(3, 0xc), rev(2, 0xb)))
        #expect(tree.leaves.map(\.id) == [rev(4, 0xd)])
        #expect(!tree.isConflicted)
    }

    @Test("a cut path's root parent links its oldest revision, so the parent arriving later is no leaf")
    func rootParentLink() throws {
        // 3-c and 4-d arrive cut at revsLimit 2, naming 2-b as 3-c's parent; 2-b arrives afterwards.
        var tree = RevTree()
        try tree.merge(RevisionPath(leaf: rev(4, 0xd), kind: .live, ancestors: [rev(3, 0xc)], rootParent: rev(2, 0xb)))
        #expect(tree.node(rev(3, 0xc))?.parent == rev(2, 0xb))
        #expect(!tree.contains(rev(2, 0xb)))
        try tree.merge(path(rev(2, 0xb), rev(1, 0xa)))
        #expect(tree.leaves.map(\.id) == [rev(4, 0xd)])
        #expect(!tree.isConflicted)
        // Without the link, 2-b would be a second open leaf: a conflict only this node sees.
        var unlinked = RevTree()
        try unlinked.merge(path(rev(4, 0xd), rev(3, 0xc)))
        try unlinked.merge(path(rev(2, 0xb), rev(1, 0xa)))
        #expect(unlinked.isConflicted)
    }

    @Test("a root parent that contradicts a known parent is rejected and changes nothing")
    func rootParentContradiction() throws {
        var tree = try linear()
        try tree.merge(path(rev(3, 0xc), rev(2, 0xb)))
        let before = tree
        let lying = try RevisionPath(leaf: rev(4, 0xd), kind: .live, ancestors: [rev(3, 0xc)], rootParent: rev(2, 0xe))
        #expect(throws: RevTreeError.conflictingAncestry(revision: rev(3, 0xc), knownParent: rev(2, 0xb), claimedParent: rev(2, 0xe))) {
            try tree.merge(lying)
        }
        #expect(tree == before)
        #expect(throws: RevTreeError.self) {
            try RevisionPath(leaf: rev(2, 0xb), kind: .live, ancestors: [rev(1, 0xa)], rootParent: rev(1, 0xf))
        }
    }

    @Test("the same edit made on two branches is one revision, so there is no conflict")
    func identicalEdits() throws {
        let base = RevisionHasher.revisionID(parent: nil, kind: .live, body: .object(["v": .int(1)]))
        let edit = RevisionHasher.revisionID(parent: base, kind: .live, body: .object(["v": .int(2)]))
        var nodeA = RevTree()
        try nodeA.insertEdit(id: base, parent: nil, kind: .live)
        var nodeB = nodeA
        try nodeA.insertEdit(id: edit, parent: base, kind: .live)
        try nodeB.insertEdit(id: RevisionHasher.revisionID(parent: base, kind: .live, body: .object(["v": .int(2)])), parent: base, kind: .live)
        try nodeA.merge(path(edit, base))
        #expect(nodeA == nodeB)
        #expect(nodeA.leaves.count == 1)
        #expect(!nodeA.isConflicted)
    }

    @Test("deleting then re-creating a document continues from the tombstone")
    func deleteThenRecreate() throws {
        var tree = try linear()
        try tree.insertEdit(id: rev(3, 0x1), parent: rev(2, 0xb), kind: .deleted)
        #expect(tree.current?.kind == .deleted)
        #expect(!tree.isConflicted)
        try tree.insertEdit(id: rev(4, 0x2), parent: rev(3, 0x1), kind: .live)
        #expect(tree.current?.id == rev(4, 0x2))
        #expect(tree.leaves.count == 1)
        #expect(!tree.isConflicted)
    }

    @Test("the current revision prefers live leaves, then generation, then digest")
    func currentOrder() throws {
        var tree = RevTree()
        try tree.merge(path(rev(5, 0x9), rev(4, 0x8), rev(3, 0x7), rev(2, 0x6), rev(1, 0x1), kind: .deleted))
        try tree.merge(path(rev(2, 0x2), rev(1, 0x1)))
        #expect(tree.current?.id == rev(2, 0x2))
        #expect(tree.isConflicted)
        try tree.merge(path(rev(2, 0x3), rev(1, 0x1)))
        #expect(tree.current?.id == rev(2, 0x3))
        #expect(tree.conflictingLeaves.map(\.id) == [rev(2, 0x3), rev(2, 0x2), rev(5, 0x9)])
    }

    @Test("closed leaves never take part in a conflict")
    func closedLeaves() throws {
        var tree = try linear()
        try tree.merge(path(rev(2, 0xf), rev(1, 0xa)))
        try tree.insertEdit(id: rev(3, 0x5), parent: rev(2, 0xb), kind: .closed)
        #expect(!tree.isConflicted)
        #expect(tree.current?.id == rev(2, 0xf))
        #expect(tree.openLeaves.map(\.id) == [rev(2, 0xf)])
    }

    @Test("a history with a gap or a wrong generation is rejected")
    func invalidHistory() {
        #expect(throws: RevTreeError.self) { try path(rev(3, 0xc), rev(1, 0xa)) }
        #expect(throws: RevTreeError.self) { try path(rev(2, 0xc), rev(2, 0xa)) }
        #expect(throws: RevTreeError.self) { try path(rev(1, 0xc), rev(0 + 1, 0xa)) }
    }

    @Test("a path that contradicts a known parent or kind is rejected and changes nothing")
    func contradictions() throws {
        var tree = try linear()
        try tree.insertEdit(id: rev(3, 0xc), parent: rev(2, 0xb), kind: .deleted)
        let before = tree
        #expect(throws: RevTreeError.conflictingAncestry(revision: rev(2, 0xb), knownParent: rev(1, 0xa), claimedParent: rev(1, 0xe))) {
            try tree.merge(path(rev(3, 0x9), rev(2, 0xb), rev(1, 0xe)))
        }
        #expect(throws: RevTreeError.conflictingKind(revision: rev(3, 0xc), known: .deleted, claimed: .closed)) {
            try tree.merge(path(rev(3, 0xc), kind: .closed))
        }
        #expect(tree == before)
    }

    @Test("a local edit must name a current leaf and the next generation")
    func localEdits() throws {
        var tree = try linear()
        #expect(throws: RevTreeError.parentNotLeaf(rev(1, 0xa))) { try tree.insertEdit(id: rev(2, 0x7), parent: rev(1, 0xa), kind: .live) }
        #expect(throws: RevTreeError.unknownParent(rev(2, 0x9))) { try tree.insertEdit(id: rev(3, 0x7), parent: rev(2, 0x9), kind: .live) }
        #expect(throws: RevTreeError.wrongGeneration(revision: rev(4, 0x7), parent: rev(2, 0xb))) { try tree.insertEdit(id: rev(4, 0x7), parent: rev(2, 0xb), kind: .live) }
        #expect(throws: RevTreeError.revisionExists(rev(2, 0xb))) { try tree.insertEdit(id: rev(2, 0xb), parent: rev(1, 0xa), kind: .live) }
    }

    @Test("the common ancestor of two branches is the newest shared revision")
    func commonAncestor() throws {
        var tree = RevTree()
        try tree.merge(path(rev(4, 0xd), rev(3, 0xc), rev(2, 0xb), rev(1, 0xa)))
        try tree.merge(path(rev(4, 0xe), rev(3, 0xf), rev(2, 0xb), rev(1, 0xa)))
        try tree.merge(path(rev(2, 0x1), rev(1, 0xa)))
        #expect(tree.commonAncestor(rev(4, 0xd), rev(4, 0xe)) == rev(2, 0xb))
        #expect(tree.commonAncestor(of: [rev(4, 0xd), rev(4, 0xe), rev(2, 0x1)]) == rev(1, 0xa))
        #expect(tree.commonAncestor(rev(4, 0xd), rev(3, 0xc)) == rev(3, 0xc))
        var stemmed = tree
        stemmed.stem(limit: 2)
        #expect(stemmed.commonAncestor(rev(4, 0xd), rev(4, 0xe)) == nil)
    }

    @Test("stemming keeps each leaf's newest revisions and any pinned revision's path")
    func stemming() throws {
        var tree = RevTree()
        var ids: [RevisionID] = []
        for g in stride(from: 10, through: 1, by: -1) { ids.append(rev(g, UInt64(g))) }
        try tree.merge(RevisionPath(leaf: ids[0], kind: .live, ancestors: Array(ids.dropFirst())))
        var pinned = tree
        let removed = tree.stem(limit: 3)
        #expect(removed == ids.suffix(7).sorted())
        #expect(tree.count == 3)
        #expect(tree.node(rev(8, 8))?.parent == rev(7, 7))
        #expect(tree.stem(limit: 3).isEmpty)
        pinned.stem(limit: 3, keeping: [rev(5, 5)])
        #expect(pinned.count == 6)
        // A branch keeps its own depth: the fork point survives while a short branch needs it.
        try tree.merge(path(rev(9, 0xff), rev(8, 8)))
        tree.stem(limit: 2)
        #expect(Set(tree.sortedNodes.map(\.id)) == [rev(10, 10), rev(9, 9), rev(9, 0xff), rev(8, 8)])
    }
}
