import CanopyCore
import CanopyReplication
import CanopySimulation
import CanopyStore
import Testing

/// Regression (found by canopy-sim, seed 2 with batch size 3 and window 8): a target that
/// completes batches faster than the source acknowledges its `checkpointSet`s used to send one
/// `checkpointSet` per batch regardless, and the ninth outstanding one tripped the state machine's
/// precondition ("more requests than the peer accepts"), killing the process.
@Suite("Remote checkpoints and the request window")
struct CheckpointWindowRegressionTests {
    @Test("a target completing many one-document batches per round trip keeps its checkpointSets within the peer's request window")
    func manyBatchesPerRoundTrip() throws {
        let harness = try ReplicationHarness(seed: 61)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        // The same documents on both sides: every batch completes as soon as its changes arrive,
        // so a new batch (and a checkpointSet) arrives before the previous acknowledgements.
        try writeDocuments(a.store, prefix: "same", count: 200)
        try writeDocuments(b.store, prefix: "same", count: 200)
        let configuration = ReplicationConfiguration(batchSize: 1, window: 8)
        harness.connect(a, b, configuration: configuration, latencySeconds: 0.05)
        #expect(harness.runUntilQuiescent())
        #expect(try harness.divergences() == [])
        // The checkpoint the source keeps for b's pull reached the end of a's feed.
        let id = ReplicationIdentity.checkpointDocumentID(ReplicationIdentity.replicationID(
            source: a.store.databaseIDBytes, target: b.store.databaseIDBytes, filter: .all))
        let stored = try #require(try a.store.localGet(id))
        let checkpoint = try #require(ReplicationCheckpoint(encoded: CanonicalJSON.encode(stored)))
        #expect(checkpoint.current.sequence == UInt64(a.store.lastSequence))
    }
}
