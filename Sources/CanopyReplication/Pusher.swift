import CanopyStore
import CanopyWire

/// This node as the source on one connection: the peer's subscriptions to our changes feed
/// (`Protocol/replication-v1.md` §6.2–6.7, push side).
///
/// It owns the subscriptions (`SubscriptionSource`, at most `WireLimits.subscriptionsMax`), what
/// the peer acknowledged through them, and whether the peer still owes the subscription its
/// `hello` announced. Each method takes one message or event and returns what the session must
/// report; messages go out through `Outbox`. The session decides when not to send (draining).
struct Pusher {
    /// How the pusher sends: the session's request ids and message queue.
    struct Outbox {
        let nextRequestID: () -> RequestID
        let send: (Message) -> Void
    }

    /// What a push step tells the session.
    struct Report {
        /// Document events (`pushed`, `refusedByPeer`), in order.
        var documents: [DocumentEvent] = []
        /// A one-shot subscription was served completely.
        var completed = false
    }

    private let store: any ReplicationStore
    private let configuration: ReplicationConfiguration
    private var sources: [RequestID: SubscriptionSource] = [:]
    /// The newest local sequence acknowledged by a subscription that has since finished.
    private var finishedAcknowledged: UInt64?
    /// The progress of the subscriptions that have finished.
    private var finishedProgress = ReplicationProgress()
    /// The peer announced it will subscribe and has not yet.
    private(set) var awaitingSubscription = false
    /// The peer stored revisions this node pushed on this connection.
    private(set) var pushedAnything = false
    /// The filter of the peer's latest subscription, once it subscribed.
    private(set) var subscribedFilter: ChangesFilter?

    init(store: any ReplicationStore, configuration: ReplicationConfiguration) {
        self.store = store
        self.configuration = configuration
    }

    /// Progress of the peer's subscriptions on this connection, summed, the finished ones
    /// included (a one-shot subscription is retired once served, and what it did still counts).
    var progress: ReplicationProgress {
        sources.values.reduce(into: finishedProgress) { sum, source in
            sum.completed += source.progress.completed
            sum.total += source.progress.total
        }
    }

    /// The newest local sequence the peer completed through its subscriptions (finished ones
    /// included: a one-shot subscription is gone once served); nil when it never subscribed.
    var acknowledgedSequence: UInt64? {
        (sources.values.map(\.acknowledgedSequence) + [finishedAcknowledged].compactMap { $0 }).max()
    }

    /// True when every subscription's batches completed and nothing of the feed is unread.
    var isDrained: Bool { sources.values.allSatisfy(\.isDrained) }

    /// True while a batch sent is not complete.
    var hasBatchesInFlight: Bool { sources.values.contains { $0.hasBatchesInFlight } }

    /// The peer's `hello` arrived: it will subscribe when it says so and this node pushes.
    mutating func peerSaidHello(subscribes: Bool) {
        awaitingSubscription = configuration.direction.pushes && subscribes
    }

    /// The peer subscribes. A node that does not push answers `forbidden`.
    mutating func subscribe(
        _ subscribe: Subscribe, peerWindow: Int, marksImportedIDs: Bool, pumping: Bool, _ outbox: Outbox
    ) throws(ReplicationError) -> Report {
        guard configuration.direction.pushes else {
            outbox.send(.error(ErrorMessage(requestID: subscribe.requestID, code: .forbidden, message: "this node does not push to you")))
            return Report()
        }
        guard sources[subscribe.requestID] == nil, sources.count < WireLimits.subscriptionsMax else {
            throw .invalidReference("subscription \(subscribe.requestID) is a duplicate or over the limit")
        }
        awaitingSubscription = false
        subscribedFilter = subscribe.filter
        let source = SubscriptionSource(subscribe: subscribe, serving: configuration.pushFilter, store: store,
                                        batchSize: configuration.batchSize, window: min(configuration.window, peerWindow),
                                        marksImportedIDs: marksImportedIDs,
                                        honoursSubscription: !configuration.servesBeyondSubscriptions)
        sources[subscribe.requestID] = source
        return try pump(source, pumping: pumping, outbox)
    }

    /// The peer ends a subscription: no new batches; those in flight complete normally.
    mutating func unsubscribe(_ unsubscribe: Unsubscribe, pumping: Bool, _ outbox: Outbox) throws(ReplicationError) -> Report {
        guard let source = sources[unsubscribe.subscriptionID] else { return Report() }
        source.stopSending()
        return try pump(source, pumping: pumping, outbox)
    }

    /// The peer's revision diff for one of our batches.
    mutating func receive(_ reply: ChangesReply, pumping: Bool, _ outbox: Outbox) throws(ReplicationError) -> Report {
        guard let source = sources.values.first(where: { $0.owns(reply.requestID) }) else {
            throw .invalidReference("changesReply for unknown request \(reply.requestID)")
        }
        let documents = try source.receive(reply, send: outbox.send)
        var report = try pump(source, pumping: pumping, outbox)
        report.documents = documents + report.documents
        return report
    }

    /// The peer stored (or refused documents of) a batch's revisions.
    mutating func receive(_ ack: RevisionsAck, pumping: Bool, _ outbox: Outbox) throws(ReplicationError) -> Report {
        guard let source = sources.values.first(where: { $0.owns(ack.requestID) }) else {
            throw .invalidReference("revisionsAck for unknown request \(ack.requestID)")
        }
        let documents = try source.receive(ack)
        // `receive` threw for a rejected batch: this one was stored.
        pushedAnything = true
        var report = try pump(source, pumping: pumping, outbox)
        report.documents = documents + report.documents
        return report
    }

    /// New local commits: continuous subscriptions send them.
    mutating func localChangesCommitted(pumping: Bool, _ outbox: Outbox) throws(ReplicationError) -> Report {
        var report = Report()
        for id in sources.keys.sorted() {
            guard let source = sources[id], source.continuous else { continue }
            source.localChangesCommitted()
            let step = try pump(source, pumping: pumping, outbox)
            report.documents += step.documents
            report.completed = report.completed || step.completed
        }
        return report
    }

    /// Sends batches while the window has room (unless the session is draining: `pumping`
    /// false), and retires a one-shot subscription served completely.
    private mutating func pump(_ source: SubscriptionSource, pumping: Bool, _ outbox: Outbox) throws(ReplicationError) -> Report {
        guard pumping else { return Report() }
        do {
            try source.pump(nextRequestID: outbox.nextRequestID, send: outbox.send)
        } catch {
            throw .store(error)
        }
        guard source.finishedSending && source.isDrained else { return Report() }
        finishedAcknowledged = max(finishedAcknowledged ?? 0, source.acknowledgedSequence)
        finishedProgress.completed += source.progress.completed
        finishedProgress.total += source.progress.total
        sources[source.subscriptionID] = nil
        return Report(completed: true)
    }
}
