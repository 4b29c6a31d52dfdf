import CanopyCore
import CanopyReplication
import CanopySimulation
import CanopyStore
import Logging
import Testing

@Suite("Filtered replication")
struct FilteredReplicationTests {
    @Test("an id-prefix pull carries only matching documents, and their later deletions")
    func prefixFilter() throws {
        let harness = try ReplicationHarness(seed: 61)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        try writeDocuments(a.store, prefix: "keep", count: 30)
        try writeDocuments(a.store, prefix: "skip", count: 30)
        let pullKeep = ReplicationConfiguration(direction: .pull, pullFilter: .idPrefix("keep-"))
        let pushAll = ReplicationConfiguration(direction: .push)
        let connection = harness.connect(b, a, configuration: pullKeep, configurationB: pushAll)
        #expect(harness.runUntilQuiescent())
        #expect(try b.store.documentCount == 30)
        #expect(try b.store.changes(since: 0).allSatisfy { $0.documentID.hasPrefix("keep-") })
        // A deletion of a matching document passes the filter.
        let doomed = try a.store.get(id: "keep-3").revision
        _ = try a.store.delete(id: "keep-3", rev: doomed)
        #expect(harness.runUntilQuiescent())
        #expect(try b.store.get(id: "keep-3").isDeleted)
        _ = connection
    }

    @Test("a filtered replication keeps its own checkpoint: switching to unfiltered starts from zero")
    func ownCheckpoint() throws {
        let harness = try ReplicationHarness(seed: 62)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        try writeDocuments(a.store, prefix: "x", count: 40)
        try writeDocuments(a.store, prefix: "y", count: 40)
        let filtered = harness.connect(b, a, configuration: ReplicationConfiguration(direction: .pull, pullFilter: .documentIDs(["x-1", "y-2"])),
                                       configurationB: ReplicationConfiguration(direction: .push))
        #expect(harness.runUntilQuiescent())
        #expect(try b.store.documentCount == 2)
        filtered.sessions.0.close()
        harness.runUntilQuiescent()
        harness.dropSessions(of: a)
        harness.dropSessions(of: b)
        // Unfiltered: a different replication id, so the filtered checkpoint does not skip the rest.
        let full = harness.connect(b, a, configuration: ReplicationConfiguration(direction: .pull),
                                   configurationB: ReplicationConfiguration(direction: .push))
        #expect(harness.runUntilQuiescent())
        #expect(try b.store.documentCount == 80)
        #expect(full.sessions.1.pushProgress.total == 80)
    }

    @Test("an application predicate filters pulled documents by their content")
    func predicateFilter() throws {
        let harness = try ReplicationHarness(seed: 63)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        try writeDocuments(a.store, prefix: "doc", count: 50)
        let evenOnly = ReplicationFilter.predicate(name: "even") { _, body in
            if case .object(let fields)? = body, case .int(let n)? = fields["n"] { return n % 2 == 0 }
            return false
        }
        harness.connect(b, a, configuration: ReplicationConfiguration(direction: .pull, pullFilter: evenOnly),
                        configurationB: ReplicationConfiguration(direction: .push))
        #expect(harness.runUntilQuiescent())
        #expect(try b.store.documentCount == 25)
    }

    @Test("a node that does not push refuses a subscription, and nothing flows")
    func refusedSubscription() throws {
        let harness = try ReplicationHarness(seed: 64)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        try writeDocuments(a.store, prefix: "private", count: 10)
        let connection = harness.connect(b, a, configuration: ReplicationConfiguration(direction: .pull),
                                         configurationB: ReplicationConfiguration(direction: .pull))
        harness.runUntilQuiescent()
        #expect(try b.store.documentCount == 0)
        #expect(connection.sessions.0.pullRefused || connection.sessions.0.isClosed)
    }
}

@Suite("Liveness")
struct LivenessTests {
    @Test("idle connections carry heartbeats and stay open; a silent peer is declared dead")
    func heartbeats() throws {
        let harness = try ReplicationHarness(seed: 71)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        let config = ReplicationConfiguration(heartbeatIntervalSeconds: 5, deadPeerIntervals: 3)
        let connection = harness.connect(a, b, configuration: config)
        #expect(harness.runUntilQuiescent())
        let before = connection.link.ends.0.messagesSent
        harness.scheduler.advance(by: 60)
        #expect(!connection.sessions.0.isClosed && !connection.sessions.1.isClosed)
        #expect(connection.link.ends.0.messagesSent > before)

        // The peer goes silent (its messages stop arriving): after three intervals, the session ends.
        connection.link.latencySeconds = 1_000_000
        harness.scheduler.advance(by: 30)
        #expect(connection.sessions.0.isClosed)
    }
}

@Suite("One-shot replication and checkpoints")
struct OneShotTests {
    @Test("a one-shot pull stops when caught up; later changes wait for the next run")
    func oneShot() throws {
        let harness = try ReplicationHarness(seed: 81)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        try writeDocuments(a.store, prefix: "first", count: 40)
        let once = ReplicationConfiguration(direction: .both, continuous: false)
        let connection = harness.connect(a, b, configuration: once)
        #expect(harness.runUntilQuiescent())
        #expect(try b.store.documentCount == 40)
        try writeDocuments(a.store, prefix: "later", count: 5)
        harness.scheduler.advance(by: 5)
        #expect(try b.store.documentCount == 40)
        _ = connection
    }

    @Test("resetCheckpoint makes the next pull start from zero, transferring only what is missing")
    func resetCheckpoint() throws {
        let harness = try ReplicationHarness(seed: 82)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        try writeDocuments(a.store, prefix: "doc", count: 60)
        let pair = ReplicatorPair(harness, a, b, configuration: ReplicationConfiguration())
        let replicatorB = pair.dialing
        pair.syncAndWait()
        #expect(try b.store.documentCount == 60)
        #expect(replicatorB.status.lastPulledSequence == 60)

        #expect(try replicatorB.resetCheckpoint())
        replicatorB.stop()
        pair.syncAndWait()
        // The new session re-read a's whole feed (60 entries) but wrote nothing new.
        #expect(replicatorB.status.pull.total == 60)
        #expect(try b.store.documentCount == 60)
    }
}

@Suite("Repeated one-shot syncs")
struct RepeatedSyncTests {
    @Test("sync on a one-shot peer whose last pass finished runs a new pass over a new connection")
    func syncAgain() throws {
        let harness = try ReplicationHarness(seed: 83)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        try writeDocuments(a.store, prefix: "first", count: 20)
        let pair = ReplicatorPair(harness, a, b, configuration: ReplicationConfiguration(continuous: false))
        pair.syncAndWait()
        #expect(try b.store.documentCount == 20)
        try writeDocuments(a.store, prefix: "second", count: 7)
        pair.syncAndWait()
        #expect(try b.store.documentCount == 27)
        #expect(pair.dialer.attempts.count == 2)
        #expect(pair.dialing.status.lastPulledSequence == 27)
    }

    @Test("after one-shot syncs both ways, neither side counts the other's documents as unconfirmed")
    func nothingUnconfirmedAfterOneShot() throws {
        let harness = try ReplicationHarness(seed: 85)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        try writeDocuments(a.store, prefix: "from-a", count: 30)
        try writeDocuments(b.store, prefix: "from-b", count: 20)
        let pair = ReplicatorPair(harness, a, b, configuration: ReplicationConfiguration(continuous: false))
        pair.syncAndWait()
        #expect(harness.runUntilQuiescent())
        #expect(try a.store.documentCount == 50 && b.store.documentCount == 50)
        #expect(try pair.accepting.pendingDocumentIDs() == [])
        #expect(try pair.dialing.pendingDocumentIDs() == [])
        try writeDocuments(b.store, prefix: "later-b", count: 5)
        pair.syncAndWait()
        #expect(harness.runUntilQuiescent())
        #expect(try pair.accepting.pendingDocumentIDs() == [])
        #expect(try pair.dialing.pendingDocumentIDs() == [])
    }

    @Test("sync on a one-shot peer pushes this node's new documents too, from either side", arguments: [true, false])
    func syncPushes(fromDialingSide: Bool) throws {
        let harness = try ReplicationHarness(seed: 84)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        let pair = ReplicatorPair(harness, a, b, configuration: ReplicationConfiguration(continuous: false))
        pair.syncAndWait()
        // Written after the first pass finished, on the node that runs the next sync.
        let writer = fromDialingSide ? b : a
        let reader = fromDialingSide ? a : b
        try writeDocuments(writer.store, prefix: "late", count: 9)
        pair.syncAndWait(on: fromDialingSide ? pair.dialing : pair.accepting)
        #expect(try reader.store.documentCount == 9)
        #expect(try harness.divergences() == [])
    }

    @Test("a one-shot sync against a peer that replicates continuously pushes, pulls and completes", arguments: [0, 1, 7])
    func oneShotAgainstContinuous(written: Int) throws {
        let harness = try ReplicationHarness(seed: 85)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        try writeDocuments(a.store, prefix: "from-a", count: 3)
        try writeDocuments(b.store, prefix: "from-b", count: written)
        let pair = ReplicatorPair(harness, a, b, configuration: ReplicationConfiguration(continuous: false),
                                  acceptingConfiguration: ReplicationConfiguration(continuous: true))
        pair.syncAndWait()
        #expect(try a.store.documentCount == 3 + written)
        #expect(try b.store.documentCount == 3 + written)
    }
}

/// Two peer replicators over simulated links: `dialing` (on node b) dials `accepting` (on node a).
final class ReplicatorPair {
    let harness: ReplicationHarness
    let dialer: FlakyDialer
    let accepting: PeerReplicator
    let dialing: PeerReplicator

    init(_ harness: ReplicationHarness, _ a: ReplicationHarness.Node, _ b: ReplicationHarness.Node, configuration: ReplicationConfiguration,
         acceptingConfiguration: ReplicationConfiguration? = nil) {
        self.harness = harness
        let logger = Logger(label: "test")
        dialer = FlakyDialer(scheduler: harness.scheduler, failures: 0)
        accepting = PeerReplicator(peerName: "b", store: a.store, dialer: nil, scheduler: harness.scheduler,
                                   random: harness.random, configuration: acceptingConfiguration ?? configuration, logger: logger)
        dialing = PeerReplicator(peerName: "a", store: b.store, dialer: dialer, scheduler: harness.scheduler,
                                 random: harness.random, configuration: configuration, logger: logger)
        accepting.start()
        let accepting = self.accepting
        dialer.accept = { accepting.accept($0) }
        dialing.start()
    }

    /// Runs `replicator.sync` (default: `dialing`'s) and the scheduler until the sync completes;
    /// records an issue if it failed.
    func syncAndWait(on replicator: PeerReplicator? = nil) {
        final class Done: @unchecked Sendable { var result: Result<Void, ReplicationError>? }
        let done = Done()
        (replicator ?? dialing).sync { done.result = $0 }
        harness.scheduler.run(until: { done.result != nil }, deadline: harness.scheduler.now + 600)
        switch done.result {
        case .failure(let error)?: Issue.record("sync failed: \(error)")
        case nil: Issue.record("sync never completed: \((replicator ?? dialing).status)")
        case .success?: break
        }
    }
}
