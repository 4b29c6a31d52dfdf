import CanopyCore
import CanopyReplication
import CanopySimulation
import CanopyStore
import CanopyWire
import Testing

/// A worker that holds every check until the test runs it, in the order the test chooses, on the
/// test's (the simulated scheduler's) thread.
final class HeldWorker: ReplicationWorker, @unchecked Sendable {
    private(set) var held: [() -> Void] = []

    func run<Output: Sendable>(_ work: @escaping @Sendable () -> Output, then completion: @escaping @Sendable (Output) -> Void) {
        held.append { completion(work()) }
    }

    /// Runs the held check at `index` (submission order) and forgets it.
    func release(_ index: Int) {
        let check = held.remove(at: index)
        check()
    }
}

@Suite("Revisions checked before the replication queue")
struct EarlyCheckTests {
    @Test("a lying revision checked early is rejected and reported as before, and checked messages are written in arrival order")
    func lyingRevisionCheckedEarly() throws {
        let held = try HeldSession(seed: 45)
        defer { withExtendedLifetime(held.session) {} }
        let (harness, b, worker, box, peer) = (held.harness, held.b, held.worker, held.outcome, held.peer)
        let fake = RevisionID(generation: 1, digestHigh: 1, digestLow: 2)
        let bodies = [Array(#"{"n":1}"#.utf8), Array(#"{"n":2}"#.utf8)]
        let honest = bodies.map { RevisionHasher.revisionID(parent: nil, kind: .live, canonicalBody: $0) }
        peer.send(.changes(Changes(requestID: 1, subscriptionID: peer.subscription!, caughtUp: true, entries: [
            ChangesEntry(sequence: 1, docID: "victim", revisions: [LeafRevision(id: fake, kind: .live)]),
            ChangesEntry(sequence: 2, docID: "one", revisions: [LeafRevision(id: honest[0], kind: .live)]),
            ChangesEntry(sequence: 3, docID: "two", revisions: [LeafRevision(id: honest[1], kind: .live)]),
        ])))
        harness.scheduler.run(until: { peer.received.contains { if case .changesReply = $0 { return true }; return false } })
        peer.send(.revisions(Revisions(requestID: 1, final: false, revisions: [
            RevisionTransfer(ancestry: [], knownAncestorTail: 0, body: Array(#"{"evil":true}"#.utf8)),
            RevisionTransfer(ancestry: [], knownAncestorTail: 0, body: bodies[0]),
        ])))
        peer.send(.revisions(Revisions(requestID: 1, final: true, revisions: [
            RevisionTransfer(ancestry: [], knownAncestorTail: 0, body: bodies[1]),
        ])))
        harness.scheduler.run(until: { worker.held.count == 2 })
        // The second message's check finishes first: it waits for the first, nothing is written.
        worker.release(1)
        harness.scheduler.advance(by: 0.5)
        #expect(try b.store.documentCount == 0)
        #expect(!peer.received.contains { if case .revisionsAck = $0 { return true }; return false })
        worker.release(0)
        harness.scheduler.run(until: { peer.received.contains { if case .revisionsAck = $0 { return true }; return false } })
        #expect(box.reason == nil)
        #expect(box.rejected.map(\.documentID) == ["victim"])
        #expect(throws: StoreError.self) { try b.store.get(id: "victim") }
        #expect(try b.store.get(id: "one").revision == honest[0])
        #expect(try b.store.get(id: "two").revision == honest[1])
        // Written in arrival order: "one" (first message) got the earlier sequence.
        #expect(try b.store.changes(since: 0).map(\.documentID) == ["one", "two"])
    }

    @Test("a session closed while a check runs writes nothing of that message")
    func closedWhileChecking() throws {
        let held = try HeldSession(seed: 46)
        let (harness, b, worker, session, peer) = (held.harness, held.b, held.worker, held.session, held.peer)
        let body = Array(#"{"n":1}"#.utf8)
        let id = RevisionHasher.revisionID(parent: nil, kind: .live, canonicalBody: body)
        peer.send(.changes(Changes(requestID: 1, subscriptionID: peer.subscription!, caughtUp: true, entries: [
            ChangesEntry(sequence: 1, docID: "doc", revisions: [LeafRevision(id: id, kind: .live)]),
        ])))
        harness.scheduler.run(until: { peer.received.contains { if case .changesReply = $0 { return true }; return false } })
        peer.send(.revisions(Revisions(requestID: 1, final: true, revisions: [
            RevisionTransfer(ancestry: [], knownAncestorTail: 0, body: body),
        ])))
        harness.scheduler.run(until: { worker.held.count == 1 })
        session.close()
        harness.scheduler.run(until: { session.isClosed })
        worker.release(0)
        harness.scheduler.advance(by: 0.5)
        #expect(try b.store.documentCount == 0)
        #expect(!peer.received.contains { if case .revisionsAck = $0 { return true }; return false })
    }

    @Test("messages checked while the writer was busy are written together, in arrival order, with the checkpoint they reach, and each is acknowledged")
    func queuedMessagesWrittenTogether() throws {
        let held = try HeldSession(seed: 47)
        defer { withExtendedLifetime(held.session) {} }
        let (harness, b, worker, box, peer) = (held.harness, held.b, held.worker, held.outcome, held.peer)
        let commits = CommitCounter()
        let token = b.store.addCommitObserver { commits.count += 1 }
        defer { withExtendedLifetime(token) {} }
        let bodies = (0..<3).map { Array(#"{"n":\#($0)}"#.utf8) }
        let ids = bodies.map { RevisionHasher.revisionID(parent: nil, kind: .live, canonicalBody: $0) }
        for batch in 0..<3 {
            peer.send(.changes(Changes(requestID: RequestID(batch + 1), subscriptionID: peer.subscription!, caughtUp: batch == 2, entries: [
                ChangesEntry(sequence: UInt64(10 * (batch + 1)), docID: "doc\(batch)", revisions: [LeafRevision(id: ids[batch], kind: .live)]),
            ])))
        }
        harness.scheduler.run(until: { peer.received.filter { if case .changesReply = $0 { return true }; return false }.count == 3 })
        for batch in 0..<3 {
            peer.send(.revisions(Revisions(requestID: RequestID(batch + 1), final: true, revisions: [
                RevisionTransfer(ancestry: [], knownAncestorTail: 0, body: bodies[batch]),
            ])))
        }
        harness.scheduler.run(until: { worker.held.count == 3 })
        // The last two finish first and wait; the first one's completion writes all three.
        worker.release(2)
        worker.release(1)
        harness.scheduler.advance(by: 0.5)
        #expect(try b.store.documentCount == 0)
        worker.release(0)
        harness.scheduler.run(until: { peer.received.filter { if case .revisionsAck = $0 { return true }; return false }.count == 3 })
        #expect(box.reason == nil)
        #expect(commits.count == 1)
        #expect(try b.store.changes(since: 0).map(\.documentID) == ["doc0", "doc1", "doc2"])
        let acked = peer.received.compactMap { message -> RequestID? in
            if case .revisionsAck(let ack) = message { return ack.requestID }
            return nil
        }
        #expect(acked == [1, 2, 3])
        // The checkpoint of the last batch was written in that same transaction.
        let id = ReplicationIdentity.checkpointDocumentID(ReplicationIdentity.replicationID(
            source: Array(repeating: 7, count: 16), target: b.store.databaseIDBytes, filter: .all))
        #expect(ReplicationCheckpoint(json: try b.store.localGet(id))?.current.sequence == 30)
    }

}

/// A pull session of a new node "b" whose checks (or, with `holdingWrites`, whose store writes)
/// wait in a `HeldWorker`, subscribed to a scripted source (hello, then an empty checkpoint).
struct HeldSession {
    let harness: ReplicationHarness
    let b: ReplicationHarness.Node
    /// Holds the checks (unless `holdingWrites`, when they run inline).
    let worker = HeldWorker()
    /// Holds the writes when `holdingWrites` (else they run inline).
    let writer = HeldWorker()
    let outcome = SessionOutcome()
    /// The session; `releaseSession()` drops the only reference the test holds.
    var session: ReplicationSession { held.session! }
    private let held = Held()
    let peer: ScriptedPeer

    private final class Held: @unchecked Sendable { var session: ReplicationSession? }

    /// Lets the session go, as a stopped replicator does: nothing the test holds keeps it.
    func releaseSession() { held.session = nil }

    init(seed: UInt64, holdingWrites: Bool = false) throws {
        harness = try ReplicationHarness(seed: seed)
        b = try harness.addNode("b")
        let link = InMemoryLink(scheduler: harness.scheduler)
        held.session = startPullSession(
            b, over: link.ends.1, harness, recording: outcome,
            worker: holdingWrites ? InlineReplicationWorker() : worker,
            writer: holdingWrites ? writer : InlineReplicationWorker())
        peer = ScriptedPeer(endpoint: link.ends.0)
        harness.scheduler.run(until: { peer.received.count >= 2 })
        peer.send(.hello(Hello(databaseID: Array(repeating: 7, count: 16), revsLimit: 1000, window: 4)))
        harness.scheduler.run(until: { peer.received.contains { if case .checkpointGet = $0 { return true }; return false } })
        guard case .checkpointGet(let get) = try #require(peer.received.last(where: { if case .checkpointGet = $0 { return true }; return false })) else { return }
        peer.send(.checkpoint(Checkpoint(requestID: get.requestID, value: nil)))
        harness.scheduler.run(until: { peer.subscription != nil })
    }
}

/// Counts commit notifications (on the simulated scheduler's thread).
final class CommitCounter: @unchecked Sendable {
    var count = 0
}
