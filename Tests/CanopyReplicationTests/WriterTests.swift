import CanopyCore
import CanopyReplication
import CanopySimulation
import CanopyStore
import CanopyWire
import Testing

/// The receiver writes checked revisions off its serial context (the session's writer), one
/// transaction at a time, and keeps answering the peer meanwhile.
@Suite("Writes off the replication queue")
struct WriterTests {
    /// One document per batch: batch `n` (request `n + 1`) offers "doc`n`" at sequence `10 (n + 1)`.
    private struct Script {
        let bodies = (0..<4).map { Array(#"{"n":\#($0)}"#.utf8) }
        var ids: [RevisionID] { bodies.map { RevisionHasher.revisionID(parent: nil, kind: .live, canonicalBody: $0) } }

        func changes(_ batch: Int, subscription: RequestID, caughtUp: Bool = false) -> Message {
            .changes(Changes(requestID: RequestID(batch + 1), subscriptionID: subscription, caughtUp: caughtUp, entries: [
                ChangesEntry(sequence: UInt64(10 * (batch + 1)), docID: "doc\(batch)", revisions: [LeafRevision(id: ids[batch], kind: .live)]),
            ]))
        }

        func revisions(_ batch: Int) -> Message {
            .revisions(Revisions(requestID: RequestID(batch + 1), final: true, revisions: [
                RevisionTransfer(ancestry: [], knownAncestorTail: 0, body: bodies[batch]),
            ]))
        }
    }

    @Test("changes are answered and later messages checked while a write is with the writer; those that queued are written together after it, each acknowledged after its commit")
    func answersWhileWriting() throws {
        let held = try HeldSession(seed: 48, holdingWrites: true)
        defer { withExtendedLifetime(held.session) {} }
        let (harness, b, writer, box, peer) = (held.harness, held.b, held.writer, held.outcome, held.peer)
        let script = Script()
        let commits = CommitCounter()
        let token = b.store.addCommitObserver { commits.count += 1 }
        defer { withExtendedLifetime(token) {} }
        peer.send(script.changes(0, subscription: peer.subscription!))
        harness.scheduler.run(until: { peer.replies == 1 })
        peer.send(script.revisions(0))
        harness.scheduler.run(until: { writer.held.count == 1 })

        // The first write is with the writer; the session answers two more batches meanwhile.
        peer.send(script.changes(1, subscription: peer.subscription!))
        peer.send(script.changes(2, subscription: peer.subscription!, caughtUp: true))
        harness.scheduler.run(until: { peer.replies == 3 })
        peer.send(script.revisions(1))
        peer.send(script.revisions(2))
        harness.scheduler.advance(by: 0.5)
        #expect(writer.held.count == 1)
        #expect(peer.acks.isEmpty)
        #expect(try b.store.documentCount == 0)

        writer.release(0)
        harness.scheduler.run(until: { peer.acks == [1] && writer.held.count == 1 })
        #expect(try b.store.changes(since: 0).map(\.documentID) == ["doc0"])
        #expect(try checkpoint(of: b) == 10)
        writer.release(0)
        harness.scheduler.run(until: { peer.acks.count == 3 })
        #expect(box.reason == nil)
        #expect(peer.acks == [1, 2, 3])
        #expect(commits.count == 2)
        #expect(try b.store.changes(since: 0).map(\.documentID) == ["doc0", "doc1", "doc2"])
        #expect(try checkpoint(of: b) == 30)
    }

    @Test("a batch that needed nothing, complete while an earlier batch is being written, is checkpointed only after that write")
    func checkpointWaitsForEarlierWrite() throws {
        let held = try HeldSession(seed: 49, holdingWrites: true)
        defer { withExtendedLifetime(held.session) {} }
        let (harness, b, writer, box, peer) = (held.harness, held.b, held.writer, held.outcome, held.peer)
        let script = Script()
        // "doc1" is already here: batch 1 needs nothing.
        try b.store.bulkInsertForeign([ForeignRevision(
            documentID: "doc1", path: try RevisionPath(leaf: script.ids[1], kind: .live, ancestors: []), body: .canonical(script.bodies[1]))])
        peer.send(script.changes(0, subscription: peer.subscription!))
        harness.scheduler.run(until: { peer.replies == 1 })
        peer.send(script.revisions(0))
        harness.scheduler.run(until: { writer.held.count == 1 })
        peer.send(script.changes(1, subscription: peer.subscription!, caughtUp: true))
        harness.scheduler.run(until: { peer.replies == 2 })
        harness.scheduler.advance(by: 0.5)
        // No second write starts while one is in flight, and the checkpoint has not moved.
        #expect(writer.held.count == 1)
        #expect(try checkpoint(of: b) == nil)

        writer.release(0)
        harness.scheduler.run(until: { writer.held.count == 1 })
        #expect(try checkpoint(of: b) == 10)
        writer.release(0)
        harness.scheduler.run(until: { box.caughtUp && !peer.acks.isEmpty })
        #expect(box.reason == nil)
        #expect(try checkpoint(of: b) == 20)
        #expect(peer.acks == [1])
    }

    @Test("a session closed while its write is with the writer: the write commits with its checkpoint, nothing is acknowledged")
    func closedWhileWriting() throws {
        let held = try HeldSession(seed: 50, holdingWrites: true)
        let (harness, b, writer, session, peer) = (held.harness, held.b, held.writer, held.session, held.peer)
        let script = Script()
        holdFirstWrite(held, script)
        session.close()
        harness.scheduler.run(until: { session.isClosed })
        writer.release(0)
        harness.scheduler.advance(by: 0.5)
        #expect(try b.store.get(id: "doc0").revision == script.ids[0])
        #expect(try checkpoint(of: b) == 10)
        #expect(peer.acks.isEmpty)
    }

    @Test("a session closed and released while its write is with the writer (its replicator stopped and gone) still reports the documents the write committed")
    func releasedWhileWriting() throws {
        let held = try HeldSession(seed: 51, holdingWrites: true)
        let (harness, b, writer, box) = (held.harness, held.b, held.writer, held.outcome)
        let script = Script()
        holdFirstWrite(held, script)
        weak let released = held.session
        held.session.close()
        harness.scheduler.run(until: { box.reason != nil })
        held.releaseSession()
        #expect(released == nil, "the test holds the last reference to the session")
        writer.release(0)
        harness.scheduler.advance(by: 0.5)
        #expect(try b.store.get(id: "doc0").revision == script.ids[0])
        #expect(box.documents.map(\.documentID) == ["doc0"])
        #expect(box.documents.map(\.kind) == [.pulled])
    }

    /// The peer offers batch 0 and sends its revision; returns once its write is with the writer.
    private func holdFirstWrite(_ held: HeldSession, _ script: Script) {
        let peer = held.peer
        peer.send(script.changes(0, subscription: peer.subscription!))
        held.harness.scheduler.run(until: { peer.replies == 1 })
        peer.send(script.revisions(0))
        held.harness.scheduler.run(until: { held.writer.held.count == 1 })
    }

    /// The sequence of node `b`'s checkpoint of its pull from the scripted peer, nil when none.
    private func checkpoint(of b: ReplicationHarness.Node) throws -> UInt64? {
        let id = ReplicationIdentity.checkpointDocumentID(ReplicationIdentity.replicationID(
            source: Array(repeating: 7, count: 16), target: b.store.databaseIDBytes, filter: .all))
        return ReplicationCheckpoint(json: try b.store.localGet(id))?.current.sequence
    }
}

extension ScriptedPeer {
    /// How many `changesReply` messages arrived.
    var replies: Int { received.filter { if case .changesReply = $0 { return true }; return false }.count }

    /// The request ids of the `revisionsAck` messages that arrived, in order.
    var acks: [RequestID] {
        received.compactMap { message -> RequestID? in
            if case .revisionsAck(let ack) = message { return ack.requestID }
            return nil
        }
    }
}
