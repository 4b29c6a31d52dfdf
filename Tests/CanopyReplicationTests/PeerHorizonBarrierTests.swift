import CanopyCore
import CanopySimulation
import CanopyStore
import CanopyWire
import Testing

@testable import CanopyReplication

/// A peer horizon lets this node stem what the peer no longer holds as a leaf, so it is recorded
/// only once the revisions the peer sent before its `checkpointSet` are written: they carry
/// leaves the peer held then, and stemmed meanwhile they would come back as phantom leaves.
@Suite("Peer horizons wait for earlier revisions")
struct PeerHorizonBarrierTests {
    @Test("the barrier hands a horizon back once the messages received before it are written, in order")
    func barrier() {
        var barrier = PeerHorizonBarrier<Int>()
        #expect(barrier.arrived(1) == 1)
        barrier.revisionsReceived()
        barrier.revisionsReceived()
        #expect(barrier.arrived(2) == nil)
        barrier.revisionsReceived()
        #expect(barrier.arrived(3) == nil)
        #expect(barrier.revisionsWritten(1).isEmpty)
        #expect(barrier.revisionsWritten(1) == [2])
        // A horizon behind a waiting one waits too, even with nothing more to write before it.
        #expect(barrier.arrived(4) == nil)
        #expect(barrier.revisionsWritten(1) == [3, 4])
        #expect(barrier.arrived(5) == 5)
    }

    @Test("a checkpointSet that follows revisions still with the writer is acknowledged at once; its horizon is recorded after their write")
    func horizonAfterEarlierWrite() throws {
        let harness = try ReplicationHarness(seed: 61)
        let b = try harness.addNode("b")
        try b.store.put(id: "mine", body: .object(["n": .int(1)]), replacing: nil)
        let link = InMemoryLink(scheduler: harness.scheduler)
        let writer = HeldWorker()
        let session = ReplicationSession(
            store: b.store, transport: link.ends.1, scheduler: harness.scheduler, random: harness.random,
            configuration: ReplicationConfiguration(direction: .both), logger: .init(label: "test"), writer: writer) { _ in }
        session.start()
        defer { withExtendedLifetime(session) {} }
        let peer = ScriptedPeer(endpoint: link.ends.0)
        let peerDatabase = [UInt8](repeating: 7, count: 16)
        peer.send(.hello(Hello(features: Hello.subscribesFeature, databaseID: peerDatabase, revsLimit: 1000, window: 4)))
        harness.scheduler.run(until: { peer.received.contains { if case .checkpointGet = $0 { return true }; return false } })
        guard case .checkpointGet(let get) = try #require(peer.received.last(where: { if case .checkpointGet = $0 { return true }; return false })) else { return }
        peer.send(.checkpoint(Checkpoint(requestID: get.requestID, value: nil)))
        harness.scheduler.run(until: { peer.subscription != nil })

        // The peer pulls from b and completes a batch: b offers "mine", which the peer holds.
        let pullID = ReplicationIdentity.replicationID(source: b.store.databaseIDBytes, target: peerDatabase, filter: .all)
        peer.send(.subscribe(Subscribe(requestID: 1001, replicationID: pullID, since: 0, continuous: true, filter: .none)))
        harness.scheduler.run(until: { peer.received.contains { if case .changes(let c) = $0 { return !c.entries.isEmpty }; return false } })
        guard case .changes(let offered) = try #require(peer.received.last(where: { if case .changes(let c) = $0 { return !c.entries.isEmpty }; return false })) else { return }
        peer.send(.changesReply(ChangesReply(requestID: offered.requestID, items: offered.entries.map { _ in ChangesReplyItem() })))
        harness.scheduler.run(until: { session.pushAcknowledgedSequence == 1 })

        // b pulls "theirs"; the write of its revisions is held.
        let body = Array(#"{"theirs":1}"#.utf8)
        let revision = RevisionHasher.revisionID(parent: nil, kind: .live, canonicalBody: body)
        peer.send(.changes(Changes(requestID: 1, subscriptionID: peer.subscription!, caughtUp: true, entries: [
            ChangesEntry(sequence: 5, docID: "theirs", revisions: [LeafRevision(id: revision, kind: .live)]),
        ])))
        harness.scheduler.run(until: { peer.received.contains { if case .changesReply = $0 { return true }; return false } })
        peer.send(.revisions(Revisions(requestID: 1, final: true, revisions: [RevisionTransfer(ancestry: [], knownAncestorTail: 0, body: body)])))
        harness.scheduler.run(until: { writer.held.count == 1 })

        // Sent after those revisions: the peer's checkpoint of b, at sequence 1.
        let checkpoint = ReplicationCheckpoint(current: .init(session: "s1", sequence: 1))
        peer.send(.checkpointSet(CheckpointSet(requestID: 1002, replicationID: pullID, value: checkpoint.encoded())))
        harness.scheduler.run(until: { peer.received.contains { if case .checkpointSetAck = $0 { return true }; return false } })
        #expect(b.store.peerHorizons.isEmpty)

        writer.release(0)
        harness.scheduler.run(until: { !b.store.peerHorizons.isEmpty })
        #expect(b.store.peerHorizons == [PeerHorizon(peer: Hex.encode(pullID), sequence: 1)])
        #expect(try b.store.get(id: "theirs").revision == revision)
        #expect(!session.isClosed)
    }
}
