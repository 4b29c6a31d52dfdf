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
}
