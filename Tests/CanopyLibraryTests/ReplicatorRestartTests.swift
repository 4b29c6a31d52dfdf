import Canopy
import Testing

/// A replicator stopped and another for the same peer started at once, as an app does when it
/// changes a replicator's configuration: the new one's first one-shot `sync()` holds every change
/// the peer had before it began, and what replication wrote meanwhile is reported.
extension NodeReplicationTests {
    @Test("a one-shot pull started right after another replicator for the same peer stopped holds the peer's newest change", .timeLimit(.minutes(5)))
    func oneShotPullAfterStop() async throws {
        try await withTwoNodes { a, b in
            a.replicator(ReplicatorConfiguration(peer: b.nodeID, direction: .push)).start()
            var revision: RevisionID?
            for round in 0..<12 {
                revision = try await a.database.save(json: .object(["round": .int(Int64(round))]), id: "counter", replacing: revision)
                let once = b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: a.listenAddress, direction: .pull, continuous: false))
                let outcome = try await once.sync()
                once.stop()
                #expect(try await b.database.document(id: "counter")?.revision == revision, "round \(round): \(outcome)")
            }
        }
    }

    @Test("a conflict settled by a replicator's resolver just after another replicator for the same peer stopped is reported in the new replicator's document events", .timeLimit(.minutes(5)))
    func resolverAfterStopReportsConflict() async throws {
        try await withTwoNodes { a, b in
            a.replicator(ReplicatorConfiguration(peer: b.nodeID, direction: .push)).start()
            for round in 0..<6 {
                let id = "doc-\(round)"
                let first = try await a.database.save(json: .object(["round": .int(Int64(round))]), id: id)
                let once = b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: a.listenAddress, direction: .pull, continuous: false))
                try await once.sync()
                once.stop()
                let mine: JSONValue = .object(["round": .int(Int64(round)), "by": .string("b")])
                let local = try await b.database.save(json: mine, id: id, replacing: first)
                try await a.database.save(json: .object(["round": .int(Int64(round)), "by": .string("a")]), id: id, replacing: first)
                let replicator = Self.pull(into: b, from: a, resolving: .custom(ClosureResolver { _ in .keep(local) }))
                var documents = replicator.documentEvents.makeAsyncIterator()
                try await replicator.sync()
                let seen = await Self.documents(&documents) { $0.event == .conflictResolved }
                replicator.stop()
                #expect(seen.last?.documentID == id, "round \(round): \(seen)")
                #expect(try await b.database.document(id: id)?.body == mine, "round \(round)")
                #expect(try await b.database.conflictedDocumentIDs().isEmpty, "round \(round)")
            }
        }
    }
}
