import CanopyCore
import CanopyReplication
import CanopySimulation
import CanopyStore
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
