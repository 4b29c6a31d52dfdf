import CanopyCore
import CanopySimulation
import CanopyStore
import CanopyWire
import Logging
import Testing
@testable import CanopyReplication

/// Real replication sessions, unchanged, one per database, over the channels of one connection.
@Suite("Replication of several databases over one connection")
struct MultiplexedReplicationTests {
    /// Every document's current revision in `store`.
    static func currentRevisions(_ store: DocumentStore) throws -> [String: RevisionID] {
        var revisions: [String: RevisionID] = [:]
        var since: Int64 = 0
        while true {
            let page = try store.changesPage(since: since, limit: 1000)
            for change in page.changes { revisions[change.documentID] = change.current }
            guard let last = page.lastSequence else { return revisions }
            since = last
        }
    }

    @Test("two databases replicate both ways over one connection, each with its own session, and converge")
    func twoDatabasesConverge() throws {
        let harness = try ReplicationHarness(seed: 31)
        let stores: [String: [String: ReplicationHarness.Node]] = [
            "a": ["notes": try harness.addNode("a-notes"), "photos": try harness.addNode("a-photos")],
            "b": ["notes": try harness.addNode("b-notes"), "photos": try harness.addNode("b-photos")],
        ]
        try writeDocuments(stores["a"]!["notes"]!.store, prefix: "notes-a", count: 300)
        try writeDocuments(stores["b"]!["notes"]!.store, prefix: "notes-b", count: 200)
        try writeDocuments(stores["a"]!["photos"]!.store, prefix: "photos-a", count: 150)
        try writeDocuments(stores["b"]!["photos"]!.store, prefix: "photos-b", count: 250)

        let pair = MuxPair(scheduler: harness.scheduler)
        let sessions = SessionList()
        for (name, side) in [("a", pair.a), ("b", pair.b)] {
            side.serve = { channel in
                let node = stores[name]![channel.database.text]!
                let session = ReplicationSession(
                    store: node.store, transport: channel, scheduler: harness.scheduler, random: harness.random,
                    configuration: ReplicationConfiguration(), logger: Logger(label: "test.\(name)")) { _ in }
                sessions.all.append(session)
                session.start()
            }
        }
        pair.openFromA("notes", "photos")
        #expect(sessions.all.count == 4)
        let done = harness.scheduler.run(until: { sessions.all.allSatisfy { !$0.isBusy } }, deadline: harness.scheduler.now + 600)
        #expect(done)

        for database in ["notes", "photos"] {
            let onA = try Self.currentRevisions(stores["a"]![database]!.store)
            let onB = try Self.currentRevisions(stores["b"]![database]!.store)
            #expect(onA == onB, "\(database) converged")
            #expect(onA.count == (database == "notes" ? 500 : 400), "\(database) holds its own documents only")
        }
        #expect(sessions.all.allSatisfy { !$0.isClosed })

        // One more edit flows on its channel while the other stays idle; then the connection
        // closes and every session sees it.
        let photosB = stores["b"]!["photos"]!.store
        let document = try photosB.get(id: "photos-a-7")
        _ = try photosB.put(id: "photos-a-7", body: .object(["edited": .bool(true)]), replacing: document.revision)
        harness.scheduler.advance(by: 2)
        #expect(try stores["a"]!["photos"]!.store.get(id: "photos-a-7").body == .object(["edited": .bool(true)]))
        pair.a.mux.close(code: .goingAway, reason: "stopping")
        pair.settle()
        #expect(sessions.all.allSatisfy { $0.isClosed })
    }
}

/// The sessions a test started, kept alive for it.
final class SessionList: @unchecked Sendable {
    var all: [ReplicationSession] = []
}
