import CanopyCore
import CanopyStore
import CanopyWire
import Testing
@testable import CanopyReplication

/// The copies of the peer's checkpoints this node keeps (§6.8), over a store in memory.
@Suite("Peer checkpoint keeper")
struct PeerCheckpointKeeperTests {
    let store = FakeReplicationStore()
    let replicationID = [UInt8](repeating: 0x5C, count: 16)
    let checkpoint = ReplicationCheckpoint(current: .init(session: "s2", sequence: 40), history: [.init(session: "s1", sequence: 12)])

    var documentID: String { ReplicationIdentity.checkpointDocumentID(replicationID) }

    @Test("checkpointGet is answered with the copy stored under its replication id, as the peer set it")
    func answerStored() throws {
        let keeper = PeerCheckpointKeeper(store: store, peerHorizonKey: nil)
        store.setLocal(documentID, checkpoint.json)
        let answer = try keeper.answer(CheckpointGet(requestID: 7, replicationID: replicationID))
        #expect(answer == .checkpoint(Checkpoint(requestID: 7, value: checkpoint.encoded())))
        #expect(store.calls == [.localGet("checkpoint/" + Hex.encode(replicationID))])
    }

    @Test("a replication id with no stored copy, or a copy that is not a checkpoint, is answered with no value")
    func answerNone() throws {
        let keeper = PeerCheckpointKeeper(store: store, peerHorizonKey: nil)
        store.setLocal(documentID, checkpoint.json)
        let otherID = [UInt8](repeating: 0x5D, count: 16)
        #expect(try keeper.answer(CheckpointGet(requestID: 1, replicationID: otherID)) == .checkpoint(Checkpoint(requestID: 1, value: nil)))
        store.setLocal(documentID, .object(["current": .string("not an entry")]))
        #expect(try keeper.answer(CheckpointGet(requestID: 2, replicationID: replicationID)) == .checkpoint(Checkpoint(requestID: 2, value: nil)))
    }

    @Test("checkpointSet is stored under its replication id and acknowledged; its horizon is capped by what the peer acknowledged")
    func storeCapsHorizon() throws {
        let keeper = PeerCheckpointKeeper(store: store, peerHorizonKey: nil)
        let set = CheckpointSet(requestID: 9, replicationID: replicationID, value: checkpoint.encoded())
        let (answer, horizon) = try keeper.store(set, acknowledged: 25)
        #expect(answer == .checkpointSetAck(CheckpointSetAck(requestID: 9)))
        #expect(store.local(documentID) == checkpoint.json)
        // The peer claims 40; this session saw it acknowledge 25.
        #expect(horizon == PeerCheckpointKeeper.Horizon(peer: Hex.encode(replicationID), sequence: 25))
        let (_, below) = try keeper.store(set, acknowledged: 100)
        #expect(below?.sequence == 40)
        // Storing a copy is not recording its horizon: the barrier decides when.
        #expect(store.horizons.isEmpty)
    }

    @Test("a peer that acknowledged nothing on this connection gets its copy stored, under its own ids, but no horizon")
    func noHorizonWithoutAcknowledgement() throws {
        let keeper = PeerCheckpointKeeper(store: store, peerHorizonKey: "peer-b")
        let (answer, horizon) = try keeper.store(
            CheckpointSet(requestID: 3, replicationID: replicationID, value: checkpoint.encoded()), acknowledged: nil)
        #expect(answer == .checkpointSetAck(CheckpointSetAck(requestID: 3)))
        #expect(horizon == nil)
        #expect(store.local("peer-checkpoint/peer-b/" + Hex.encode(replicationID)) == checkpoint.json)
        #expect(store.local(documentID) == nil, "nothing under the id this node's own checkpoints use")
    }

    @Test("a named peer's copies are bounded: the one written longest ago makes room, one kept up to date stays, and other peers' are untouched")
    func copiesAreBoundedPerPeer() throws {
        let keeper = PeerCheckpointKeeper(store: store, peerHorizonKey: "peer-b", checkpointsMax: 3)
        let other = PeerCheckpointKeeper(store: store, peerHorizonKey: "peer-c", checkpointsMax: 3)
        let ids = (0..<5).map { [UInt8](repeating: UInt8($0), count: 16) }
        func set(_ keeper: PeerCheckpointKeeper, _ id: [UInt8]) throws {
            _ = try keeper.store(CheckpointSet(requestID: 1, replicationID: id, value: checkpoint.encoded()), acknowledged: nil)
        }
        func held(_ keeper: PeerCheckpointKeeper, _ id: [UInt8]) throws -> Bool {
            try keeper.answer(CheckpointGet(requestID: 1, replicationID: id)) != .checkpoint(Checkpoint(requestID: 1, value: nil))
        }
        try set(other, ids[0])
        for id in ids.prefix(3) { try set(keeper, id) }
        try set(keeper, ids[0])  // brought up to date: now the newest
        try set(keeper, ids[3])
        try set(keeper, ids[4])
        #expect(try [ids[0], ids[3], ids[4]].allSatisfy { try held(keeper, $0) })
        #expect(try !held(keeper, ids[1]) && !held(keeper, ids[2]))
        #expect(try held(other, ids[0]))
    }

    @Test("a named peer with no copy of its own is answered with the copy kept before copies were kept per peer")
    func readsTheCopyKeptBefore() throws {
        let keeper = PeerCheckpointKeeper(store: store, peerHorizonKey: "peer-b")
        store.setLocal(documentID, checkpoint.json)
        #expect(try keeper.answer(CheckpointGet(requestID: 7, replicationID: replicationID)) == .checkpoint(Checkpoint(requestID: 7, value: checkpoint.encoded())))
    }

    @Test("a checkpointSet whose value is not a Canopy checkpoint is refused with invalidDocument and nothing is stored")
    func refusesForeignValue() throws {
        let keeper = PeerCheckpointKeeper(store: store, peerHorizonKey: nil)
        let (answer, horizon) = try keeper.store(
            CheckpointSet(requestID: 4, replicationID: replicationID, value: Array(#"{"seq":40}"#.utf8)), acknowledged: 40)
        #expect(answer == .error(ErrorMessage(requestID: 4, code: .invalidDocument, message: "checkpoint value is not a Canopy checkpoint")))
        #expect(horizon == nil)
        #expect(store.calls.isEmpty)
    }

    @Test("a horizon is recorded under the configured peer key when one is set")
    func recordsUnderPeerKey() throws {
        let keeper = PeerCheckpointKeeper(store: store, peerHorizonKey: "peer-b")
        let (_, horizon) = try keeper.store(
            CheckpointSet(requestID: 5, replicationID: replicationID, value: checkpoint.encoded()), acknowledged: 30)
        try keeper.record(try #require(horizon))
        #expect(store.horizons == [PeerHorizon(peer: "peer-b", sequence: 30)])
    }

    @Test("store failures surface as operating errors, not protocol violations")
    func storeFailures() {
        let keeper = PeerCheckpointKeeper(store: store, peerHorizonKey: nil)
        store.fail(.localGet)
        store.fail(.localPut)
        store.fail(.recordPeerHorizon)
        #expect(thrown { try keeper.answer(CheckpointGet(requestID: 1, replicationID: replicationID)) }?.isStoreFailure == true)
        let set = CheckpointSet(requestID: 2, replicationID: replicationID, value: checkpoint.encoded())
        #expect(thrown { try keeper.store(set, acknowledged: 1) }?.isStoreFailure == true)
        #expect(thrown { try keeper.record(.init(peer: "p", sequence: 1)) }?.isStoreFailure == true)
    }
}
