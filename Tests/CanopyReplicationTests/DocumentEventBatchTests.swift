import CanopyCore
import CanopyReplication
import CanopySimulation
import CanopyStore
import Logging
import Testing

@Suite("Document events reported per batch")
struct DocumentEventBatchTests {
    /// Every `SessionEvent` a session reported, recorded on the scheduler's context.
    final class Recorder: @unchecked Sendable {
        var batches: [[DocumentEvent]] = []
    }

    @Test("a session reports one document event per document, batched, in the order the source's changes list them")
    func batchedEventsKeepDocumentOrder() throws {
        let harness = try ReplicationHarness(seed: 91)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        let count = 230
        let batchSize = 50
        _ = try writeDocuments(a.store, prefix: "doc", count: count, batch: 37)
        let expected = try a.store.changes(since: 0).map(\.documentID)
        #expect(expected.count == count)

        let link = InMemoryLink(scheduler: harness.scheduler)
        let pushed = Recorder()
        let pulled = Recorder()
        let source = session(a.store, link.ends.0, harness, ReplicationConfiguration(direction: .push, batchSize: batchSize), pushed)
        let target = session(b.store, link.ends.1, harness, ReplicationConfiguration(direction: .pull, batchSize: batchSize), pulled)
        source.start()
        target.start()
        #expect(harness.runUntilQuiescent())
        #expect(try b.store.documentCount == count)

        for recorder in [pulled, pushed] {
            #expect(recorder.batches.allSatisfy { !$0.isEmpty })
            // Batched: at most one report per batch of changes, not one per document.
            #expect(recorder.batches.count <= (count + batchSize - 1) / batchSize)
        }
        let pulledEvents = pulled.batches.flatMap { $0 }
        #expect(pulledEvents.allSatisfy { $0.kind == .pulled })
        #expect(pulledEvents.map(\.documentID) == expected)
        let pushedEvents = pushed.batches.flatMap { $0 }
        #expect(pushedEvents.allSatisfy { $0.kind == .pushed })
        #expect(pushedEvents.map(\.documentID) == expected)
        // The pulled event names the revision written, as the per-document events did.
        for event in pulledEvents.prefix(5) {
            #expect(event.revision == (try b.store.get(id: event.documentID).revision))
        }
        _ = (source, target)
    }

    private func session(
        _ store: DocumentStore, _ transport: InMemoryLink.Endpoint, _ harness: ReplicationHarness,
        _ configuration: ReplicationConfiguration, _ recorder: Recorder
    ) -> ReplicationSession {
        ReplicationSession(
            store: store, transport: transport, scheduler: harness.scheduler, random: harness.random,
            configuration: configuration, logger: Logger(label: "test")
        ) { event in
            if case .documents(let events) = event { recorder.batches.append(events) }
        }
    }
}
