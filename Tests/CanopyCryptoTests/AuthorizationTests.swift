import Testing
@testable import CanopyCrypto

@Suite("Authorisation and simultaneous connect")
struct AuthorizationTests {
    @Test("pending peers count repeated attempts and list in node id order")
    func pendingPeersRecord() {
        let pending = PendingPeers()
        pending.record(Fixture.bob.nodeID, address: "a:1", at: .seconds(5))
        pending.record(Fixture.alice.nodeID, address: "b:2", at: .seconds(6))
        pending.record(Fixture.bob.nodeID, address: "c:3", at: .seconds(7))
        let all = pending.all
        #expect(all.map(\.nodeID) == [Fixture.alice.nodeID, Fixture.bob.nodeID].sorted())
        let bob = all.first { $0.nodeID == Fixture.bob.nodeID }
        #expect(bob == PendingPeer(nodeID: Fixture.bob.nodeID, address: "c:3", firstSeen: .seconds(5), lastSeen: .seconds(7), attempts: 2))
        #expect(pending.remove(Fixture.bob.nodeID) != nil)
        #expect(pending.all.map(\.nodeID) == [Fixture.alice.nodeID])
    }

    @Test("the pending record stays bounded, forgetting the least recently seen peer")
    func pendingPeersBounded() {
        let pending = PendingPeers()
        var random = Fixture.entropy(3)
        var ids: [NodeID] = []
        for second in 0...PendingPeers.peersMax {
            let id = NodeID(publicKey: random.bytes(32))!
            ids.append(id)
            pending.record(id, address: "x", at: .seconds(second))
        }
        #expect(pending.all.count == PendingPeers.peersMax)
        #expect(!pending.all.contains { $0.nodeID == ids[0] })
        #expect(pending.all.contains { $0.nodeID == ids.last! })
    }

    @Test("both ends of a simultaneous connect keep the connection whose initiator has the larger id")
    func simultaneousConnect() {
        let (low, high) = (min(Fixture.alice.nodeID, Fixture.bob.nodeID), max(Fixture.alice.nodeID, Fixture.bob.nodeID))
        let fromHigh = SimultaneousConnect.Connection(initiator: high, responder: low, transcriptHash: Fixture.filled(9))
        let fromLow = SimultaneousConnect.Connection(initiator: low, responder: high, transcriptHash: Fixture.filled(1))
        #expect(SimultaneousConnect.keep(fromHigh, fromLow) == .first)
        #expect(SimultaneousConnect.keep(fromLow, fromHigh) == .second)
        #expect(SimultaneousConnect.outboundWins(local: high, remote: low))
        #expect(!SimultaneousConnect.outboundWins(local: low, remote: high))
    }

    @Test("two connections from the same initiator are decided by the smaller transcript hash")
    func sameInitiator() {
        let a = SimultaneousConnect.Connection(initiator: Fixture.alice.nodeID, responder: Fixture.bob.nodeID, transcriptHash: Fixture.filled(2))
        let b = SimultaneousConnect.Connection(initiator: Fixture.alice.nodeID, responder: Fixture.bob.nodeID, transcriptHash: Fixture.filled(3))
        #expect(SimultaneousConnect.keep(a, b) == .first)
        #expect(SimultaneousConnect.keep(b, a) == .second)
    }

    @Test("adoption takes any connection without a session, the winner during one, and both ends agree")
    func adoption() {
        let (low, high) = (min(Fixture.alice.nodeID, Fixture.bob.nodeID), max(Fixture.alice.nodeID, Fixture.bob.nodeID))
        let fromHigh = SimultaneousConnect.Connection(initiator: high, responder: low, transcriptHash: Fixture.filled(9))
        let fromLow = SimultaneousConnect.Connection(initiator: low, responder: high, transcriptHash: Fixture.filled(1))
        // Each end sees the two connections in the other order; both keep the one from `high`.
        var atLow = SimultaneousConnect.Adoption()
        var atHigh = SimultaneousConnect.Adoption()
        let taken = [
            atLow.admit(fromLow, from: "high", sessionOpen: false), atLow.admit(fromHigh, from: "high", sessionOpen: true),
            atHigh.admit(fromHigh, from: "low", sessionOpen: false), atHigh.admit(fromLow, from: "low", sessionOpen: true),
        ]
        #expect(taken == [true, true, true, false])
        #expect(atLow.connection(of: "high") == fromHigh && atHigh.connection(of: "low") == fromHigh)
        // A redial after the session ended is taken whatever the rule says of the old one.
        let redial = atHigh.admit(fromLow, from: "low", sessionOpen: false)
        #expect(redial && atHigh.connection(of: "low") == fromLow)
        atHigh.forget("low")
        #expect(atHigh.connection(of: "low") == nil)
    }
}
