import CanopyCore
import CanopySimulation
import CanopyStore
import CanopyWire
import Logging
import Testing
@testable import CanopyReplication

/// A dialer that connects a new in-memory pipe to the responding side's link.
final class PipeDialer: ConnectionDialer, @unchecked Sendable {
    let scheduler: SimulatedScheduler
    var responder: PeerLink?
    private(set) var dials = 0
    /// Pipes made so far, newest last (a test closes one to cut the connection).
    private(set) var pipes: [ConnectionPipe] = []

    init(scheduler: SimulatedScheduler) { self.scheduler = scheduler }

    func dial(_ completion: @escaping @Sendable (Result<any ConnectionTransport, ReplicationError>) -> Void) {
        dials += 1
        let pipe = ConnectionPipe(scheduler: scheduler)
        pipes.append(pipe)
        scheduler.schedule(after: 0.001) { [self] in
            responder?.adopt(pipe.ends.1, role: .responder)
            completion(.success(pipe.ends.0))
        }
    }
}

/// Two nodes replicating several databases over one link each, as the agent does.
@Suite("Peer links: every shared database over one connection")
struct PeerLinkTests {
    final class Refusals: @unchecked Sendable { var databases: [String] = [] }

    /// `a` dials `b`; each replicates the databases in `replicated` with the other.
    final class LinkedPair {
        let harness: ReplicationHarness
        let dialer: PipeDialer
        var links: [String: PeerLink] = [:]
        var stores: [String: [String: ReplicationHarness.Node]] = [:]
        var replicators: [String: [String: PeerReplicator]] = [:]
        let refusals = Refusals()

        init(seed: UInt64, replicated: [String: [String]]) throws {
            harness = try ReplicationHarness(seed: seed)
            dialer = PipeDialer(scheduler: harness.scheduler)
            for side in ["a", "b"] {
                let refusals = self.refusals
                let link = PeerLink(
                    peerName: side == "a" ? "b" : "a", connectionID: [UInt8](repeating: side == "a" ? 1 : 2, count: 16),
                    dialer: side == "a" ? dialer : nil, scheduler: harness.scheduler, logger: Logger(label: "test.\(side)"),
                    refusal: { database in
                        refusals.databases.append("\(side):\(database)")
                        return (.forbidden, "database \(database) is not shared with you")
                    })
                links[side] = link
                for name in replicated[side]! {
                    let node = try harness.addNode("\(side)-\(name)")
                    stores[side, default: [:]][name] = node
                    let database = DatabaseName(validating: name)!
                    let replicator = PeerReplicator(
                        peerName: link.peerName, store: node.store, dialer: link.channelDialer(for: database), scheduler: harness.scheduler,
                        random: harness.random, configuration: ReplicationConfiguration(), logger: Logger(label: "test.\(side).\(name)"))
                    link.add(replicator, for: database)
                    replicators[side, default: [:]][name] = replicator
                }
            }
            dialer.responder = links["b"]
            for side in ["b", "a"] { for replicator in replicators[side]!.values { replicator.start() } }
        }

        func settle(_ condition: () throws -> Bool) -> Bool {
            var met = false
            _ = harness.scheduler.run(until: { met = (try? condition()) ?? false; return met }, deadline: harness.scheduler.now + 300)
            return met
        }
    }

    @Test("two shared databases converge over one connection; a database the peer does not share is refused with its reason and nothing of it moves")
    func sharedDatabasesConvergeOverOneConnection() throws {
        let pair = try LinkedPair(seed: 41, replicated: ["a": ["default", "notes", "secret"], "b": ["default", "notes"]])
        try writeDocuments(pair.stores["a"]!["default"]!.store, prefix: "a", count: 40)
        try writeDocuments(pair.stores["b"]!["notes"]!.store, prefix: "n", count: 30)
        try writeDocuments(pair.stores["a"]!["secret"]!.store, prefix: "s", count: 5)
        let converged = pair.settle {
            try pair.stores["b"]!["default"]!.store.documentCount == 40 && pair.stores["a"]!["notes"]!.store.documentCount == 30
        }
        #expect(converged)
        #expect(pair.dialer.dials == 1, "one connection carries every database")
        #expect(pair.refusals.databases.first == "b:secret")
        let secret = try #require(pair.replicators["a"]!["secret"])
        #expect(secret.status.lastError?.contains("not shared with you") == true, "\(String(describing: secret.status.lastError))")
        #expect(try pair.stores["b"]!["notes"]!.store.documentCount == 30 && pair.stores["b"]!["default"]!.store.documentCount == 40)
    }

    @Test("a replicator stopped and released while its channel is being opened closes the channel when it opens: the peer's session does not wait for a hello that never comes")
    func releasedWhileOpening() throws {
        let pair = try LinkedPair(seed: 23, replicated: ["a": ["default"], "b": ["default", "notes"]])
        #expect(pair.settle { pair.links["a"]!.isConnected && pair.replicators["a"]!["default"]!.status.state == .idle })
        let notes = DatabaseName(validating: "notes")!
        let node = try pair.harness.addNode("a-notes")
        var replicator: PeerReplicator? = PeerReplicator(
            peerName: "b", store: node.store, dialer: pair.links["a"]!.channelDialer(for: notes), scheduler: pair.harness.scheduler,
            random: pair.harness.random, configuration: ReplicationConfiguration(), logger: Logger(label: "test.a.notes"))
        pair.links["a"]!.add(replicator!, for: notes)
        replicator!.start()  // asks the connection for a channel; the answer comes later
        replicator!.stop()
        pair.links["a"]!.remove(notes)
        replicator = nil
        let peer = pair.replicators["b"]!["notes"]!
        let start = pair.harness.scheduler.now
        _ = pair.harness.scheduler.run(deadline: start + 5)
        #expect(peer.currentSession == nil, "b's notes session still waits for a's hello \(pair.harness.scheduler.now - start) s on")
    }

    @Test("when the connection drops, every database's replicator comes back over one new connection and goes on")
    func reconnectCarriesEveryDatabase() throws {
        let pair = try LinkedPair(seed: 42, replicated: ["a": ["default", "notes"], "b": ["default", "notes"]])
        try writeDocuments(pair.stores["a"]!["default"]!.store, prefix: "a", count: 10)
        #expect(pair.settle { try pair.stores["b"]!["default"]!.store.documentCount == 10 })
        pair.dialer.pipes.last!.ends.1.close(.failed("cable pulled"))  // a sees the peer hang up
        try writeDocuments(pair.stores["a"]!["notes"]!.store, prefix: "late", count: 7)
        try writeDocuments(pair.stores["b"]!["default"]!.store, prefix: "b", count: 3)
        #expect(pair.settle {
            try pair.stores["b"]!["notes"]!.store.documentCount == 7 && pair.stores["a"]!["default"]!.store.documentCount == 13
        })
        #expect(pair.dialer.dials == 2, "one new connection for both databases")
    }

    /// What a sync waiting on `a` heard.
    final class SyncResult: @unchecked Sendable { var result: Result<Void, ReplicationError>? }

    @Test("a sync waiting when the peer's own connection replaces this node's (both dialled at once) finishes over the new one")
    func syncOutlivesAReplacedConnection() throws {
        let pair = try LinkedPair(seed: 43, replicated: ["a": ["default"], "b": ["default"]])
        try writeDocuments(pair.stores["a"]!["default"]!.store, prefix: "first", count: 5)
        #expect(pair.settle { try pair.stores["b"]!["default"]!.store.documentCount == 5 })
        try writeDocuments(pair.stores["a"]!["default"]!.store, prefix: "second", count: 20)
        let waiting = SyncResult()
        pair.replicators["a"]!["default"]!.sync { waiting.result = $0 }
        // b dials a while a's connection is open: each side adopts the newer one.
        let newer = ConnectionPipe(scheduler: pair.harness.scheduler)
        pair.links["a"]!.adopt(newer.ends.0, role: .responder)
        pair.links["b"]!.adopt(newer.ends.1, role: .initiator)
        #expect(pair.settle { waiting.result != nil })
        switch waiting.result {
        case .success?: break
        case .failure(let error)?: Issue.record("the sync failed: \(error)")
        case nil: Issue.record("the sync never finished")
        }
        #expect(try pair.stores["b"]!["default"]!.store.documentCount == 25)
    }
}
