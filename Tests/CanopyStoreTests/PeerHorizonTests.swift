import CanopyCore
import Testing
@testable import CanopyStore

/// `Protocol/design.md` §2.7: history is stemmed to revsLimit, but never so far that it removes
/// what a peer may still hold. Peer horizons (the sequence through which a peer holds this store's changes) decide
/// what that is.
@Suite("Stemming keeps what peers may still hold")
struct PeerHorizonTests {
    /// `count` edits of `doc` after `from` (nil: a new document), newest last.
    private func edits(_ store: DocumentStore, from: RevisionID?, count: Int, tag: String = "e") throws -> [RevisionID] {
        var current = from
        var made: [RevisionID] = []
        for n in 0..<count {
            let next = try store.put(id: "doc", body: body(n, tag), replacing: current)
            made.append(next)
            current = next
        }
        return made
    }

    /// A store at revsLimit 2 whose peer "p" holds the third revision of `doc` as its leaf, then
    /// `count` more edits on top of it.
    private func peerHoldsThird(thenEdits count: Int) throws -> (DocumentStore, base: [RevisionID], later: [RevisionID]) {
        let store = try TestStore(.init(revsLimit: 2)).store
        let base = try edits(store, from: nil, count: 3)
        try store.recordPeerHorizon(peer: "p", sequence: store.lastSequence)
        return (store, base, try edits(store, from: base[2], count: count, tag: "later"))
    }

    private func history(_ store: DocumentStore) throws -> [RevisionID] {
        try store.get(id: "doc", options: .revisions).history ?? []
    }

    @Test("with no peer horizon a document is stemmed to revsLimit")
    func noHorizonStemsToLimit() throws {
        let store = try TestStore(.init(revsLimit: 2)).store
        let made = try edits(store, from: nil, count: 6)
        #expect(try history(store) == [made[5], made[4]])
    }

    @Test("the leaves a peer holds are kept while the document moves on, and stemmed once the peer has caught up")
    func heldLeafKeptUntilCaughtUp() throws {
        let (store, base, later) = try peerHoldsThird(thenEdits: 3)
        // The peer holds base[2] as its leaf: it and the path from it to the leaf stay.
        #expect(try history(store) == [later[2], later[1], later[0], base[2]])

        try store.recordPeerHorizon(peer: "p", sequence: store.lastSequence)
        let last = try store.put(id: "doc", body: body(9), replacing: later[2])
        // The peer now holds later[2]: the rest goes, down to revsLimit.
        #expect(try history(store) == [last, later[2]])
    }

    @Test("a document whose earlier state a peer has not reached is not stemmed at all")
    func laggingPeerStopsStemming() throws {
        let store = try TestStore(.init(revsLimit: 2)).store
        try store.put(id: "other", body: body(0), replacing: nil)
        try store.recordPeerHorizon(peer: "slow", sequence: store.lastSequence)
        let made = try edits(store, from: nil, count: 5)
        #expect(try history(store) == made.reversed())
        // Another peer that is up to date does not release what the slow one may hold.
        try store.recordPeerHorizon(peer: "fast", sequence: store.lastSequence)
        let next = try store.put(id: "doc", body: body(7), replacing: made[4])
        #expect(try history(store) == [next] + made.reversed())
        // Forgotten, the slow peer holds nothing back; the fast one, once it has `next`, lets the
        // next write stem down to revsLimit.
        try store.forgetPeerHorizon(peer: "slow")
        try store.recordPeerHorizon(peer: "fast", sequence: store.lastSequence)
        let after = try store.put(id: "doc", body: body(8), replacing: next)
        #expect(try history(store) == [after, next])
    }

    @Test("horizons only move forward, are clamped to the last sequence and survive a reopen")
    func horizonsPersist() throws {
        let test = try TestStore(.init(revsLimit: 2))
        try test.store.put(id: "doc", body: body(0), replacing: nil)
        try test.store.recordPeerHorizon(peer: "p", sequence: 1_000)
        #expect(test.store.peerHorizons == [PeerHorizon(peer: "p", sequence: 1)])
        try test.store.put(id: "doc2", body: body(0), replacing: nil)
        try test.store.recordPeerHorizon(peer: "p", sequence: 2)
        try test.store.recordPeerHorizon(peer: "p", sequence: 1)
        try test.store.recordPeerHorizon(peer: "q", sequence: 0)
        let expected = [PeerHorizon(peer: "p", sequence: 2), PeerHorizon(peer: "q", sequence: 0)]
        #expect(test.store.peerHorizons == expected)
        let reopened = try test.reopen(.init())
        #expect(reopened.peerHorizons == expected)
        try reopened.forgetPeerHorizon(peer: "q")
        #expect(reopened.peerHorizons == [PeerHorizon(peer: "p", sequence: 2)])
        // Horizons are not metadata the store itself reads as settings.
        #expect(reopened.revsLimit == 2)
    }

    @Test("a history sent to a peer reaches the leaf it holds even beyond revsLimit")
    func sentHistoryReachesHeldLeaf() throws {
        let (store, base, later) = try peerHoldsThird(thenEdits: 4)
        let request = RevisionRequest(documentID: "doc", revisions: [later[3]], knownAncestors: [base[2]])
        let reaching = try #require(try store.revisionsToSend([request], revsLimit: 2).first)
        #expect(reaching.path.revisions == [later[3], later[2], later[1], later[0], base[2]])
        #expect(reaching.path.rootParent == nil)

        // Told to stop at the limit, it names the link instead of reaching.
        let cut = try #require(try store.revisionsToSend([request], revsLimit: 2, knownAncestorReach: 2).first)
        #expect(cut.path.revisions == [later[3], later[2]])
        #expect(cut.path.rootParent == later[1])
    }
}
