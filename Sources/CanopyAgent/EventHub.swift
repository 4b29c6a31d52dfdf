import CanopyAdmin
import CanopyCore
import CanopyReplication
import Dispatch

/// The agent's events (Protocol/admin-v1.md §5): the ring that numbers and holds them
/// (`EventRing`), the admin clients that stream them (`events`), and publishing to those clients.
///
/// Invariants: the ring and the subscribers are touched only on `queue`, the agent's queue (which
/// the agent shares with it, so an event the agent emits while it handles a command is numbered
/// after what that command saw); emitting is callable from any queue and hops there, keeping the
/// order in which the hops were made; a line is rendered only when a client subscribes.
final class EventHub: @unchecked Sendable {
    private let queue: DispatchQueue
    private var ring = EventRing()
    private var subscribers: [ObjectIdentifier: AdminClient] = [:]
    /// Told of every batch of document events once it is recorded (the resolvers watch for
    /// conflicts); on `queue`.
    private var documentObserver: (([DocumentEvent], String, DatabaseName) -> Void)?

    /// `queue` is the agent's.
    init(queue: DispatchQueue) {
        self.queue = queue
    }

    /// Records an event of `D`'s type whose data is `data`'s members, and streams it to
    /// subscribers. Callable from any queue.
    func emit<D: AdminEventData>(_ data: D) {
        emit(batch: [.event(data)])
    }

    /// Records an event about one document the agent made itself. Callable from any queue.
    func emit(_ document: Admin.DocumentEvent) {
        emit(batch: [.agentDocument(document)])
    }

    /// Records events in order and streams them to subscribers, in one hop to the agent's queue.
    /// Callable from any queue.
    func emit(batch: [AgentEvent.Content]) {
        let time = Agent.wallClock()
        queue.async { [self] in
            for content in batch {
                let event = ring.append(content, time: time)
                // Build the line only when someone listens.
                guard !subscribers.isEmpty else { continue }
                publish(event)
            }
        }
    }

    /// Sets what is told of each batch of document events after it is recorded. On `queue`.
    func observeDocuments(_ observer: @escaping ([DocumentEvent], String, DatabaseName) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        documentObserver = observer
    }

    /// Records a replication batch's document events (one per document) as the array it is, and
    /// streams them to subscribers. `nodeID` is the peer they came from; empty for an import or
    /// the agent's own conflict scan. The observer (the resolvers) hears of every database's
    /// events. Callable from any queue.
    func emit(documentEvents: [DocumentEvent], peer nodeID: String, database: DatabaseName = .default) {
        guard !documentEvents.isEmpty else { return }
        let time = Agent.wallClock()
        queue.async { [self] in
            let first = ring.append(documents: documentEvents, peer: nodeID, database: database, time: time)
            documentObserver?(documentEvents, nodeID, database)
            guard !subscribers.isEmpty else { return }
            for (offset, event) in documentEvents.enumerated() {
                let content = AgentEvent.Content.document(nodeID: nodeID, event: event, database: database)
                publish(AgentEvent(sequence: first + UInt64(offset), time: time, content: content))
            }
        }
    }

    /// Sends `event` to every subscriber.
    private func publish(_ event: AgentEvent) {
        dispatchPrecondition(condition: .onQueue(queue))
        // Encoded once for every subscriber; the clients share the bytes.
        let line = AdminResponseLine.line(event.line)
        for client in subscribers.values { client.sendLine(encoded: line) }
    }

    /// `events`: replies with the sequence to expect, then streams every event after `since`
    /// (the ones still held first). `missed` counts events dropped from the ring before they
    /// could be sent.
    func subscribe(_ command: Admin.Subscribe, client: AdminClient, _ reply: @escaping TypedAdminRoute<Admin.Subscribe>.Reply) {
        dispatchPrecondition(condition: .onQueue(queue))
        let since = command.since.map(UInt64.init) ?? ring.lastSequence
        let (backlog, missed) = ring.events(after: since)
        client.staysOpenAfterInput()
        reply(.success(Admin.Subscribe.Reply(lastSeq: Int64(ring.lastSequence), missed: Int64(missed))))
        for event in backlog { client.sendLine(event.line) }
        let key = ObjectIdentifier(client)
        subscribers[key] = client
        client.onClose { [weak self] in
            guard let self else { return }
            self.queue.async { self.subscribers[key] = nil }
        }
    }
}
