import CanopyCore
import CanopyStore
import CanopyWire

/// This node as the target on one connection: its subscription to the peer's changes, the
/// incoming writes, and the copy of its checkpoint the peer keeps (`Protocol/replication-v1.md`
/// §6.2–6.8, pull side).
///
///     hello → begin: checkpointGet → checkpoint → subscribe(since) → [changes → changesReply →
///             revisions (checked off the serial context) → write → revisionsAck]* → caughtUp
///
/// It holds the pull's state (`PullState`), the write queue with its one write in flight
/// (`IncomingWrites`) and the peer's checkpoint copy (`RemoteCheckpointer`). The session drives
/// it: it passes messages in, runs the writes it hands out on the writer, and reports what comes
/// back. Messages go out through the `Pusher.Outbox` the session passes.
struct Puller {
    private let store: any ReplicationStore
    private let configuration: ReplicationConfiguration
    private(set) var state: PullState = .idle
    private var incoming = IncomingWrites()
    private var remoteCheckpoint: RemoteCheckpointer
    /// The peer takes acknowledgements that name refused documents (its `hello`'s `refusals`).
    private var peerNamesRefusals = false
    /// Whether the subscription reached the peer's end at least once in this pass.
    private(set) var caughtUpOnce = false

    init(store: any ReplicationStore, configuration: ReplicationConfiguration) {
        self.store = store
        self.configuration = configuration
        remoteCheckpoint = RemoteCheckpointer(everyBatches: configuration.remoteCheckpointEveryBatches)
    }

    /// The subscription's target, while subscribed.
    var target: SubscriptionTarget? { state.target }
    /// Progress of the subscription.
    var progress: ReplicationProgress { target?.progress ?? ReplicationProgress() }
    /// True while batches received are not complete.
    var hasBatchesInFlight: Bool { target?.hasBatchesInFlight ?? false }
    /// True when the subscription has nothing in flight (or there is none).
    var isDrained: Bool { target?.isDrained ?? true }
    /// True when the peer's copy of the checkpoint is as new as offered (nothing in flight).
    var checkpointCopySettled: Bool { remoteCheckpoint.isSettled }

    /// Starts a pass: reads the local checkpoint and asks the peer for its copy.
    mutating func begin(peerDatabaseID: [UInt8], namesRefusals: Bool, _ outbox: Pusher.Outbox) throws(ReplicationError) {
        peerNamesRefusals = namesRefusals
        let replicationID = ReplicationIdentity.replicationID(
            source: peerDatabaseID, target: store.databaseIDBytes, filter: configuration.pullFilter)
        let local: ReplicationCheckpoint?
        do {
            local = ReplicationCheckpoint(json: try store.localGet(ReplicationIdentity.checkpointDocumentID(replicationID)))
        } catch { throw .store(error) }
        let requestID = outbox.nextRequestID()
        state = .awaitingCheckpoint(requestID: requestID, replicationID: replicationID, local: local)
        outbox.send(.checkpointGet(CheckpointGet(requestID: requestID, replicationID: replicationID)))
    }

    /// True when another pass may start now (`PullState.canStartAnotherPass`).
    var canStartAnotherPass: Bool { state.canStartAnotherPass }

    /// Forgets the ended pass before `begin` starts another.
    mutating func resetForAnotherPass() {
        state = .idle
        caughtUpOnce = false
    }

    /// The peer's copy of our checkpoint: subscribes from the later of the two. Returns the
    /// sequence the pull resumes from.
    mutating func receive(_ checkpoint: Checkpoint, session: String, _ outbox: Pusher.Outbox) throws(ReplicationError) -> UInt64 {
        guard case .awaitingCheckpoint(let asked, let replicationID, let local) = state, asked == checkpoint.requestID else {
            throw .invalidReference("checkpoint answers no request of ours")
        }
        let remote = checkpoint.value.flatMap { ReplicationCheckpoint(encoded: $0) }
        let since = ReplicationCheckpoint.startSequence(local: local, remote: remote)
        let requestID = outbox.nextRequestID()
        let filter = configuration.pullFilter.wireFilter ?? ChangesFilter.none
        outbox.send(.subscribe(Subscribe(requestID: requestID, replicationID: replicationID, since: since,
                                         continuous: configuration.continuous, filter: filter)))
        let target = SubscriptionTarget(subscriptionID: requestID, replicationID: replicationID,
                                        filter: configuration.pullFilter, store: store,
                                        policy: configuration.conflictPolicy, session: session,
                                        since: since, localCheckpoint: local, namesRefusals: peerNamesRefusals)
        state = .subscribed(target, ended: false)
        return since
    }

    /// A batch of the peer's changes: answers with the revision diff. A one-shot subscription
    /// that caught up has ended.
    mutating func receive(_ changes: Changes, _ outbox: Pusher.Outbox) throws(ReplicationError) {
        guard let target else { throw .invalidReference("changes without a subscription") }
        if changes.caughtUp && !configuration.continuous { state.endSubscription() }
        outbox.send(.changesReply(try target.receive(changes)))
    }

    /// The revisions of one message, resolved against its batch, to be checked.
    func foreignRevisions(requestID: RequestID, revisions: [ReceivedRevision]) throws(ReplicationError) -> SubscriptionTarget.Received {
        guard let target else { throw .invalidReference("revisions without a subscription") }
        return try target.foreignRevisions(requestID: requestID, revisions: revisions)
    }

    /// Checked messages arrived, in arrival order.
    mutating func checked(_ group: [RevisionCheckPipeline.Checked]) {
        incoming.append(group)
    }

    /// The next transaction for the writer, unless one is in flight or there is nothing to
    /// write; a message whose check failed as a whole throws (a protocol violation).
    mutating func nextWrite() throws(ReplicationError) -> SubscriptionTarget.Write? {
        guard let target else { return nil }
        let messages: [SubscriptionTarget.CheckedMessage]
        switch incoming.nextWrite() {
        case .none: return nil
        case .failed(let requestID, let problem): try target.refuse(requestID: requestID, problem: problem)
        case .checkpointOnly: messages = []
        case .write(let group): messages = group
        }
        guard let write = try target.prepareWrite(messages) else { return nil }
        incoming.writeStarted()
        return write
    }

    /// The writer committed `write` (for the target `writtenFor`): acknowledges the batches it
    /// completed and sends the peer a checkpoint copy when one is due. Returns what to report,
    /// nil when the target was replaced meanwhile (nothing more is sent for it).
    mutating func written(
        _ write: SubscriptionTarget.Write, events: [DocumentEvent], writtenFor: ObjectIdentifier, _ outbox: Pusher.Outbox
    ) -> SubscriptionTarget.Completion? {
        incoming.writeFinished()
        guard let target, ObjectIdentifier(target) == writtenFor else { return nil }
        let (acks, completion) = target.finish(write, events: events)
        for ack in acks { outbox.send(.revisionsAck(ack)) }
        if completion.checkpoint != nil, remoteCheckpoint.batchCompleted(caughtUp: completion.caughtUp) {
            sendCheckpointCopy(outbox)
        }
        if completion.caughtUp { caughtUpOnce = true }
        return completion
    }

    /// A write failed or the session ended mid-write: the write is no longer in flight.
    mutating func writeAbandoned() {
        incoming.writeFinished()
    }

    /// The peer stored our checkpoint: send the newest one if batches completed meanwhile.
    mutating func checkpointCopyAcknowledged(_ outbox: Pusher.Outbox) {
        if remoteCheckpoint.acknowledged() { sendCheckpointCopy(outbox) }
    }

    /// The peer answered one of our requests with an error. Returns the reason when it refused
    /// our subscription (the pull is then over; the push side goes on); a refused checkpoint
    /// copy is forgotten (the next batch offers one again).
    mutating func receive(_ error: ErrorMessage) -> String? {
        if let target, target.subscriptionID == error.requestID {
            let reason = "\(error.code): \(error.message)"
            state = .refused(reason)
            return reason
        }
        _ = remoteCheckpoint.refused(error.requestID)
        return nil
    }

    /// Draining: ends the subscription (`unsubscribe`) so no new batch comes; those in flight
    /// complete.
    mutating func stopSubscription(_ outbox: Pusher.Outbox) {
        guard let target, !state.subscriptionEnded else { return }
        state.endSubscription()
        outbox.send(.unsubscribe(Unsubscribe(subscriptionID: target.subscriptionID)))
    }

    /// The session ended: what was not written is dropped (the peer sends it again next time).
    mutating func sessionEnded() {
        incoming.removeAll()
    }

    private mutating func sendCheckpointCopy(_ outbox: Pusher.Outbox) {
        guard let target, let checkpoint = target.currentCheckpoint else { return }
        let requestID = outbox.nextRequestID()
        remoteCheckpoint.sent(requestID)
        outbox.send(.checkpointSet(CheckpointSet(requestID: requestID, replicationID: target.replicationID, value: checkpoint.encoded())))
    }
}
