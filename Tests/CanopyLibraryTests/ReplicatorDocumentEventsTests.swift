import Canopy
import CanopyReplication
import Foundation
import Testing

/// A replicator's document events: what B's replicator reports as it replicates from A.
extension NodeReplicationTests {
    /// The document events `iterator` gives up to and including the first that `last` accepts
    /// (all of them if the stream ends first).
    static func documents(
        _ iterator: inout AsyncStream<ReplicatedDocument>.Iterator, until last: (ReplicatedDocument) -> Bool
    ) async -> [ReplicatedDocument] {
        var seen: [ReplicatedDocument] = []
        while let document = await iterator.next() {
            seen.append(document)
            if last(document) { break }
        }
        return seen
    }

    /// B's replicator, dialling A, not started yet; A's replicator allows B (with `pullOnly`, A
    /// only sends and B only receives).
    static func replicator(of b: Node, from a: Node, pullOnly: Bool = false) -> Replicator {
        a.replicator(ReplicatorConfiguration(peer: b.nodeID, direction: pullOnly ? .push : .both)).start()
        return b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: a.listenAddress, direction: pullOnly ? .pull : .both))
    }

    @Test("every kind of document event the engine reports but pushed has a replicated document event of the same name")
    func everyEngineKindIsReported() {
        let engine = Set(DocumentEventKind.allCases.map(\.rawValue)).subtracting([DocumentEventKind.pushed.rawValue])
        #expect(Set(ReplicatedDocument.Event.allCases.map(\.rawValue)) == engine)
    }

    @Test("a document saved and then deleted on A shows in B's document events as pulled, with its id, revision and database", .timeLimit(.minutes(5)))
    func pulledDocumentEvents() async throws {
        try await withTwoNodes { a, b in
            let replicator = Self.replicator(of: b, from: a)
            var documents = replicator.documentEvents.makeAsyncIterator()
            replicator.start()
            let saved = try await a.database.save(Note(title: "Events", text: "pulled by B"), id: "note:events")
            let seen = await Self.documents(&documents) { $0.documentID == "note:events" }
            #expect(seen.last == ReplicatedDocument(event: .pulled, documentID: "note:events", database: "default", revision: saved))

            let deleted = try await a.database.delete(id: "note:events", revision: saved)
            let after = await Self.documents(&documents) { $0.documentID == "note:events" }
            #expect(after.last == ReplicatedDocument(event: .pulled, documentID: "note:events", revision: deleted, deleted: true))
            replicator.stop()
        }
    }

    @Test("the same document edited on both nodes shows on B, which pulls A's edit, as a conflict its policy settles", .timeLimit(.minutes(5)))
    func conflictDocumentEvents() async throws {
        try await withTwoNodes { a, b in
            // Only B receives, so only B sees the conflict.
            let replicator = Self.replicator(of: b, from: a, pullOnly: true)
            var documents = replicator.documentEvents.makeAsyncIterator()
            replicator.start()
            let base = try await a.database.save(Note(title: "Plan", text: "base"), id: "note:plan")
            let pulled = await Self.documents(&documents) { $0.documentID == "note:plan" }
            #expect(pulled.last?.event == .pulled && pulled.last?.revision == base, "\(pulled)")

            try await b.database.save(Note(title: "Plan", text: "edited on B"), id: "note:plan", replacing: base)
            try await a.database.save(Note(title: "Plan", text: "edited on A"), id: "note:plan", replacing: base)
            let detected = await Self.documents(&documents) { $0.documentID == "note:plan" && $0.event != .pulled }
            #expect(detected.last?.event == .conflictDetected, "\(detected)")
            let settled = await Self.documents(&documents) { $0.documentID == "note:plan" }
            let current = try #require(try await b.database.document(id: "note:plan"))
            #expect(settled.last?.event == .conflictResolved && settled.last?.revision == current.revision, "\(settled)")
            #expect(try await b.database.conflictedDocumentIDs().isEmpty)
            replicator.stop()
        }
    }

    @Test("stopping a replicator ends its document event streams, whether taken before or after start, or never started", .timeLimit(.minutes(5)))
    func stopEndsDocumentEvents() async throws {
        try await withTwoNodes { a, b in
            try await a.database.save(Note(title: "Stop", text: "pulled before stop"), id: "note:stop")
            let replicator = Self.replicator(of: b, from: a)
            var before = replicator.documentEvents.makeAsyncIterator()
            replicator.start()
            var after = replicator.documentEvents.makeAsyncIterator()
            let pulled = await Self.documents(&before) { $0.documentID == "note:stop" }
            #expect(pulled.last?.event == .pulled, "\(pulled)")

            replicator.stop()
            // Each stream ends: these return once it has (what is left in it is A's document at most).
            let restBefore = await Self.documents(&before) { _ in false }
            let restAfter = await Self.documents(&after) { _ in false }
            #expect((restBefore + restAfter).allSatisfy { $0.documentID == "note:stop" }, "\(restBefore + restAfter)")

            let unstarted = b.replicator(ReplicatorConfiguration(peer: a.nodeID))
            var never = unstarted.documentEvents.makeAsyncIterator()
            unstarted.stop()
            #expect(await never.next() == nil)
        }
    }
}
