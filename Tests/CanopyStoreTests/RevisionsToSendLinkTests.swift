import CanopyCore
import Testing
@testable import CanopyStore

/// Regression (found by canopy-sim with revsLimit 4, seeds 2064 2089 2099 2109): a path cut at
/// revsLimit just above the revision the peer holds used to leave it out, so the peer recorded
/// the branch with an unknown parent and its own leaf stayed open beside it (a false conflict
/// that, for a re-created document, closed the re-creation and never converged).
@Suite("Revisions to send keep the link to what the peer holds")
struct RevisionsToSendLinkTests {
    @Test("a path cut at revsLimit names the peer's known ancestor just beyond the cut")
    func cutPathNamesKnownAncestor() throws {
        let test = try TestStore(.init(revsLimit: 4))
        var current = try test.store.put(id: "doc", body: body(0), replacing: nil)
        for n in 1..<6 { current = try test.store.put(id: "doc", body: body(n), replacing: current) }
        let deleted = try test.store.delete(id: "doc", rev: current)
        var revived = try test.store.put(id: "doc", body: body(10), replacing: nil)
        for n in 11..<14 { revived = try test.store.put(id: "doc", body: body(n), replacing: revived) }

        // The peer holds the deletion; four revisions (the limit) lie between.
        let sent = try test.store.revisionsToSend([RevisionRequest(documentID: "doc", revisions: [revived], knownAncestors: [deleted])])
        let path = try #require(sent.first?.path)
        #expect(path.revisions.count == 5)
        #expect(path.ancestors.last == deleted)

        // Without a known ancestor the cut stays at the limit.
        let plain = try test.store.revisionsToSend([RevisionRequest(documentID: "doc", revisions: [revived], knownAncestors: [])])
        #expect(plain.first?.path.revisions.count == 4)
    }

    @Test("a document stored as one revision sends it alone, linked to its parent as a root parent or as the peer's known ancestor")
    func singleRowDocument() throws {
        // A document received as its leaf alone, cut one revision deep by its sender, is stored
        // as one row with its parent link: the path built without an ancestry array must name
        // that link exactly as a longer stored history would.
        let source = try TestStore()
        let first = try source.store.put(id: "doc", body: body(0), replacing: nil)
        let second = try source.store.put(id: "doc", body: body(1), replacing: first)
        let third = try source.store.put(id: "doc", body: body(2), replacing: second)
        let root = try source.store.put(id: "root", body: body(3), replacing: nil)
        let cut = try source.store.revisionsToSend(
            [RevisionRequest(documentID: "doc", revisions: [third], knownAncestors: []),
             RevisionRequest(documentID: "root", revisions: [root], knownAncestors: [])],
            revsLimit: 1, knownAncestorReach: 1)
        #expect(cut.map(\.path.ancestors) == [[], []])
        let test = try TestStore()
        try test.store.bulkInsertForeign(cut)

        let requests = [
            RevisionRequest(documentID: "doc", revisions: [third], knownAncestors: []),
            RevisionRequest(documentID: "doc", revisions: [third], knownAncestors: [second]),
            RevisionRequest(documentID: "doc", revisions: [third], knownAncestors: [first]),
            RevisionRequest(documentID: "root", revisions: [root], knownAncestors: []),
        ]
        let sent = try test.store.revisionsToSend(requests)
        #expect(sent.map(\.path.leaf) == [third, third, third, root])
        #expect(sent.map(\.path.ancestors) == [[], [second], [], []])
        #expect(sent.map(\.path.rootParent) == [second, nil, second, nil])
        #expect(sent.allSatisfy { $0.path.kind == .live })

        // Passed on again, the path is accepted as it came.
        let peer = try TestStore()
        try peer.store.bulkInsertForeign(try test.store.revisionsToSend([requests[0], requests[3]]))
        #expect(try peer.store.get(id: "doc").revision == third)
        #expect(try peer.store.get(id: "root").revision == root)
    }
}
