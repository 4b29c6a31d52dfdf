import CanopyCore
import CanopyStore
import CanopyWire
import Testing
@testable import CanopyReplication

/// The replicator's pure state types, driven without a store, a queue or a transport.
@Suite("Replicator state")
struct ReplicatorStateTests {
    @Test("the peer's checkpoint copy goes out every N batches and on catch-up, one at a time, the newest after the ack")
    func remoteCheckpointer() {
        var copies = RemoteCheckpointer(everyBatches: 3)
        #expect(copies.isSettled)
        let step1 = copies.batchCompleted(caughtUp: false)
        #expect(!step1)
        let step2 = copies.batchCompleted(caughtUp: false)
        #expect(!step2)
        let step3 = copies.batchCompleted(caughtUp: false)
        #expect(step3)
        copies.sent(10)
        #expect(!copies.isSettled && copies.inFlight == 10)
        // Catching up makes a copy due, but one is in flight: it waits for the ack.
        let step4 = copies.batchCompleted(caughtUp: true)
        #expect(!step4)
        #expect(copies.deferred)
        let step5 = copies.acknowledged()
        #expect(step5)
        copies.sent(11)
        #expect(!copies.deferred && copies.inFlight == 11)
        let step6 = copies.acknowledged()
        #expect(!step6)
        #expect(copies.isSettled)
        // A refusal of the set in flight forgets it; an error for another request does not.
        let step7 = copies.batchCompleted(caughtUp: true)
        #expect(step7)
        copies.sent(12)
        let step8 = copies.refused(13)
        #expect(!step8)
        let step9 = copies.refused(12)
        #expect(step9)
        #expect(copies.isSettled)
    }

    /// A checked message of `count` new documents, or one whose check failed.
    private func checked(_ requestID: RequestID, count: Int, final: Bool = true, failing: Bool = false) throws -> RevisionCheckPipeline.Checked {
        if failing { return .init(requestID: requestID, final: final, result: .failure(.batchTooLarge(count: count, limit: 0))) }
        let revisions = try (0..<count).map { index in
            let body = JSONValue.object(["request": .int(Int64(requestID)), "index": .int(Int64(index))])
            let leaf = RevisionHasher.revisionID(parent: nil, kind: .live, body: body)
            return ForeignRevision(
                documentID: "d\(requestID)-\(index)", path: try RevisionPath(leaf: leaf, kind: .live), body: .value(body))
        }
        return .init(requestID: requestID, final: final, result: .success(try DocumentStore.checkForeign(revisions)))
    }

    @Test("incoming writes: one in flight, queued messages grouped up to the revision limit, a failed check handed out at the head")
    func incomingWrites() throws {
        var writes = IncomingWrites(revisionsMax: 5)
        guard case .checkpointOnly = writes.nextWrite() else {
            Issue.record("an empty queue offers the checkpoint alone")
            return
        }
        writes.append([try checked(1, count: 2), try checked(2, count: 2), try checked(3, count: 2)])
        guard case .write(let first) = writes.nextWrite() else {
            Issue.record("expected a write")
            return
        }
        #expect(first.map(\.requestID) == [1, 2])
        writes.writeStarted()
        // While it is in flight nothing else is handed out, whatever arrives.
        writes.append([try checked(4, count: 9), try checked(5, count: 1, failing: true)])
        guard case .none = writes.nextWrite() else {
            Issue.record("a second write while one is in flight")
            return
        }
        writes.writeFinished()
        guard case .write(let second) = writes.nextWrite() else {
            Issue.record("expected the next write")
            return
        }
        // A message over the limit still goes, alone after the ones before it.
        #expect(second.map(\.requestID) == [3])
        writes.writeStarted()
        writes.writeFinished()
        guard case .write(let third) = writes.nextWrite() else {
            Issue.record("expected the large message")
            return
        }
        #expect(third.map(\.requestID) == [4])
        writes.writeStarted()
        writes.writeFinished()
        guard case .failed(let requestID, _) = writes.nextWrite() else {
            Issue.record("expected the failed check at the head")
            return
        }
        #expect(requestID == 5)
        writes.removeAll()
        #expect(writes.queued == 0)
    }
}

/// Heartbeats and dead-peer detection on a clock the test moves.
@Suite("Liveness")
struct LivenessStateTests {
    @Test("a quiet side sends a heartbeat after half an interval; a peer silent for the dead intervals is dead")
    func ticks() {
        var liveness = Liveness(intervalSeconds: 10, deadIntervals: 3, now: 100)
        #expect(liveness.tick(at: 104) == .none)
        #expect(liveness.tick(at: 105) == .sendHeartbeat)
        liveness.sent(at: 105)
        liveness.received(at: 110)
        #expect(liveness.tick(at: 109) == .none)
        #expect(liveness.tick(at: 139) == .sendHeartbeat)
        #expect(liveness.tick(at: 140) == .peerDead(silentSeconds: 30))
        liveness.received(at: 140)
        #expect(liveness.tick(at: 141) == .sendHeartbeat)
    }
}
