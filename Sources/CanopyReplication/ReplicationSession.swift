import CanopyCore
import CanopyStore
import CanopyWire
import DequeModule
import Logging

/// What a session reports to whoever owns it (a `PeerReplicator`, a test, the simulator).
public enum SessionEvent: Sendable {
    /// The peer's `hello` arrived.
    case connected(peerDatabaseID: [UInt8])
    /// Something happened to documents: one event per document, in the order the batch (or the
    /// failure) produced them; never empty. One `SessionEvent` per batch rather than per
    /// document, because each hop through the owner's closures cost reference counting per
    /// document on the replication hot path (in both agents).
    case documents([DocumentEvent])
    /// Our subscription to the peer's changes recorded a checkpoint at this source sequence.
    case pullCheckpoint(UInt64)
    /// The peer refused our subscription (it does not push to us). The session goes on with the
    /// other direction; the reason is for people.
    case pullRefused(String)
    /// Our subscription caught up with the peer (every batch up to its current end is durable).
    case pullCaughtUp
    /// A one-shot subscription the peer made to us was served completely.
    case pushCompleted
    /// A batch completed in either direction (progress changed; the session may now be idle).
    case progress
    /// The session ended.
    case closed(TransportCloseReason)
}

/// One connection's replication, both directions (`Protocol/design.md` §4.1): CouchDB's algorithm in binary
/// over one connection, receiver-driven.
///
///     connect → hello ⇄ hello
///     pull:  checkpointGet → checkpoint → subscribe(since) → [changes → changesReply →
///            revisions → revisionsAck]* → checkpointSet (periodically) → … caughtUp
///     push:  the mirror image, answering the peer's subscribe
///
/// The session runs entirely on its scheduler's serial context: the transport delivers there,
/// timers fire there, and store commit notifications hop there. It holds no lock.
public final class ReplicationSession: @unchecked Sendable {
    private let store: any ReplicationStore
    private let transport: any MessageTransport
    private let scheduler: any ReplicationScheduler
    private let random: any RandomSource
    private let configuration: ReplicationConfiguration
    private let logger: Logger
    private let onEvent: @Sendable (SessionEvent) -> Void

    private var nextRequestID: RequestID = 1
    /// The message-level rules (CanopyWire): every message in and out passes through it.
    private var machine: ConnectionStateMachine
    private var peerDatabaseID: [UInt8]?
    private var peerWindow = 1
    /// The peer's `hello` has the `importedIDs` feature: revisions with imported ids are marked.
    private var peerAcceptsImportedIDs = false
    /// The peer's `hello` has the `refusals` feature: acks may name refused documents.
    private var peerAcceptsRefusals = false
    /// This node as the source: the peer's subscriptions.
    private var pusher: Pusher
    /// Where our pull stands (`PullState`).
    private var pull: PullState = .idle
    /// Our subscription's target, while subscribed.
    private var target: SubscriptionTarget? { pull.target }
    /// The peer's copy of our pull checkpoint (`checkpointSet`): when to send, what is in flight.
    private var remoteCheckpoint: RemoteCheckpointer
    private var lastReceived: Double
    private var lastSent: Double
    private var heartbeatTimer: (any Cancellable)?
    private var commitObserver: StoreObserverToken?
    /// Received revisions being checked off the serial context, written in arrival order.
    private var checks: RevisionCheckPipeline!
    /// Where the store writes of received revisions run (`ReplicationWorker`): off the serial
    /// context in the agent, so that the session keeps answering `changes` (read from the
    /// store's snapshot connection) while a transaction runs.
    private let writer: any ReplicationWorker
    /// Checked messages waiting for the writer, and the one write in flight.
    private var incoming = IncomingWrites()
    public private(set) var isClosed = false
    /// Bytes are counted by transports; messages by the session, for stats.
    public private(set) var messagesSent = 0
    public private(set) var messagesReceived = 0

    /// Creates a session over a connected transport. Call `start()` to begin.
    public convenience init(
        store: DocumentStore, transport: any MessageTransport, scheduler: any ReplicationScheduler,
        random: any RandomSource, configuration: ReplicationConfiguration, logger: Logger,
        worker: any ReplicationWorker = InlineReplicationWorker(),
        writer: any ReplicationWorker = InlineReplicationWorker(),
        onEvent: @escaping @Sendable (SessionEvent) -> Void
    ) {
        self.init(
            replicating: store, transport: transport, scheduler: scheduler, random: random, configuration: configuration,
            logger: logger, worker: worker, writer: writer, onEvent: onEvent)
    }

    /// Creates a session over a connected transport, replicating any `ReplicationStore`.
    package init(
        replicating store: any ReplicationStore, transport: any MessageTransport, scheduler: any ReplicationScheduler,
        random: any RandomSource, configuration: ReplicationConfiguration, logger: Logger,
        worker: any ReplicationWorker = InlineReplicationWorker(),
        writer: any ReplicationWorker = InlineReplicationWorker(),
        onEvent: @escaping @Sendable (SessionEvent) -> Void
    ) {
        self.store = store
        self.transport = transport
        self.scheduler = scheduler
        self.random = random
        self.configuration = configuration
        self.logger = logger
        self.onEvent = onEvent
        self.writer = writer
        pusher = Pusher(store: store, configuration: configuration)
        remoteCheckpoint = RemoteCheckpointer(everyBatches: configuration.remoteCheckpointEveryBatches)
        lastReceived = scheduler.now
        lastSent = scheduler.now
        machine = ConnectionStateMachine(localHello: Hello(
            features: (configuration.direction.pulls ? Hello.subscribesFeature : 0) | Hello.importedIDsFeature
                | Hello.refusalsFeature, databaseID: store.databaseIDBytes, revsLimit: min(store.revsLimit, WireLimits.revsLimitMax),
            window: configuration.window))
        checks = RevisionCheckPipeline(worker: worker) { [unowned self] checked in writeChecked(checked) }
    }

    /// Progress of our subscription to the peer (pull).
    public var pullProgress: ReplicationProgress { target?.progress ?? ReplicationProgress() }
    /// Progress of the peer's subscriptions to us (push), summed.
    public var pushProgress: ReplicationProgress { pusher.progress }
    /// The newest local sequence the peer has completed through its subscriptions (nil when the
    /// peer has not subscribed).
    public var pushAcknowledgedSequence: UInt64? { pusher.acknowledgedSequence }

    /// True until the session has exchanged hellos and (when it pulls) caught up with the peer
    /// once, and afterwards while batches are in flight in either direction.
    public var isBusy: Bool {
        if isClosed { return false }
        if peerDatabaseID == nil || pull.awaitingCheckpoint { return true }
        if configuration.direction.pulls && !pullRefused && !pullCaughtUpOnce { return true }
        if confirmationPullDue { return true }
        return pusher.awaitingSubscription || !(target?.isDrained ?? true) || !pusher.isDrained
    }

    /// One-shot mode: the revisions this node pushed in this pass are now in the peer's changes
    /// feed, after the point our pull had reached. Until our pull reads past them, the peer counts
    /// them among its changes this node has not confirmed (its `pending` for us), although we hold
    /// them. So a one-shot pass that pushed anything ends with one more pull from our checkpoint:
    /// the peer offers those documents' leaves and we answer that we have them — a changes round
    /// trip, no bodies. It only pulls, so it asks nothing of the peer but to serve a subscription.
    private var confirmationPullStarted = false

    /// True while the confirmation pull described above is still to be made.
    private var confirmationPullDue: Bool {
        !configuration.continuous && configuration.direction.pulls && !pullRefused && pusher.pushedAnything && !confirmationPullStarted
    }

    /// Starts the confirmation pull once our pull has caught up and our push has drained.
    private func startConfirmationPullIfDue() {
        guard confirmationPullDue, pullCaughtUpOnce, pull.subscriptionEnded, !(target?.hasBatchesInFlight ?? false),
            pusher.isDrained, drainCompletion == nil
        else { return }
        confirmationPullStarted = true
        pullAgain()
    }

    /// Whether our subscription reached the peer's end at least once.
    public private(set) var pullCaughtUpOnce = false
    /// Whether the peer refused our subscription.
    public var pullRefused: Bool { pull.isRefused }

    /// The peer's database id, once its `hello` arrived.
    public var peerDatabase: [UInt8]? { peerDatabaseID }

    /// Sends `hello`, starts heartbeats and listens for commits. Must run on the serial context.
    public func start() {
        transport.start { [weak self] event in self?.handle(event) }
        perform(machine.start())
        let scheduler = self.scheduler
        commitObserver = store.addCommitObserver { [weak self] in
            scheduler.execute { [weak self] in self?.localChangesCommitted() }
        }
        scheduleHeartbeat()
    }

    /// Finishes the batches in flight, then closes (SIGTERM): no new batch is started in either
    /// direction (our subscription is ended with `unsubscribe`), batches already sent complete and
    /// are checkpointed, then `close`. After `timeoutSeconds` it closes anyway: an incomplete
    /// batch is simply not checkpointed and is sent again next time.
    public func drainAndClose(timeoutSeconds: Double, _ completion: @escaping @Sendable () -> Void) {
        guard !isClosed else { return completion() }
        drainCompletion = completion
        if let target, !pull.subscriptionEnded {
            pull.endSubscription()
            send(.unsubscribe(Unsubscribe(subscriptionID: target.subscriptionID)))
        }
        drainTimer = scheduler.schedule(after: timeoutSeconds) { [weak self] in
            guard let self, let completion = self.drainCompletion else { return }
            self.drainCompletion = nil
            self.close(code: .goingAway, reason: "shutting down")
            completion()
        }
        finishDrainIfIdle()
    }

    private var drainCompletion: (@Sendable () -> Void)?
    private var drainTimer: (any Cancellable)?

    /// While draining: closes once nothing is in flight in either direction.
    private func finishDrainIfIdle() {
        guard let completion = drainCompletion, !isClosed else { return }
        // The peer's copy of our checkpoint must be current too, or the next session resumes from
        // the older of the two: wait for the last `checkpointSet` (and the one it deferred).
        let inFlight = (target?.hasBatchesInFlight ?? false) || pusher.hasBatchesInFlight
            || !remoteCheckpoint.isSettled
        guard !inFlight else { return }
        drainCompletion = nil
        drainTimer?.cancel()
        close(code: .goingAway, reason: "shutting down")
        completion()
    }

    /// Closes the session gracefully (`close` then the transport's FINAL).
    public func close(code: ErrorCode = .normal, reason: String = "done") {
        guard !isClosed else { return }
        perform(machine.close(code: code, reason: reason))
        finish(.localClosed)
        transport.close(.localClosed)
    }

    // MARK: Events

    private func handle(_ event: TransportEvent) {
        guard !isClosed else { return }
        switch event {
        case .closed(let reason):
            machine.transportClosed()
            finish(reason)
        case .message(let message):
            lastReceived = scheduler.now
            messagesReceived += 1
            perform(machine.receive(message))
        }
    }

    /// Carries out the state machine's actions.
    private func perform(_ actions: [ConnectionStateMachine.Action]) {
        for action in actions {
            guard !isClosed else { return }
            do {
                switch action {
                case .send(let message): transmit(message)
                case .deliver(let message): try receive(message)
                case .deliverRevisions(let requestID, let final, let revisions):
                    try receiveRevisions(requestID: requestID, final: final, revisions: revisions)
                case .closeTransport(let code):
                    let reason: TransportCloseReason = machine.violation.map { .protocolViolation("\($0)") }
                        ?? (code == .normal || code == .goingAway ? .peerClosed : .failed("closed with \(code)"))
                    finish(reason)
                    transport.close(reason)
                }
            } catch {
                fail(error)
            }
        }
    }

    /// A message that passed the state machine's rules.
    private func receive(_ message: Message) throws(ReplicationError) {
        switch message {
        case .hello(let hello): try receiveHello(hello)
        case .subscribe(let subscribe): try receiveSubscribe(subscribe)
        case .unsubscribe(let unsubscribe): try receiveUnsubscribe(unsubscribe)
        case .changes(let changes): try receiveChanges(changes)
        case .changesReply(let reply): try receiveChangesReply(reply)
        case .revisions: break  // delivered resolved, as `deliverRevisions`
        case .revisionsAck(let ack): try receiveRevisionsAck(ack)
        case .checkpointGet(let get): try answerCheckpointGet(get)
        case .checkpoint(let checkpoint): try receiveCheckpoint(checkpoint)
        case .checkpointSet(let set): try storeRemoteCheckpoint(set)
        case .checkpointSetAck: receiveCheckpointSetAck()
        case .heartbeat, .heartbeatEcho, .close: break
        case .error(let error): try receiveError(error)
        }
    }

    private func receiveHello(_ hello: Hello) throws(ReplicationError) {
        peerDatabaseID = hello.databaseID
        peerWindow = hello.window
        peerAcceptsImportedIDs = hello.features & Hello.importedIDsFeature != 0
        peerAcceptsRefusals = hello.features & Hello.refusalsFeature != 0
        pusher.peerSaidHello(subscribes: hello.features & Hello.subscribesFeature != 0)
        onEvent(.connected(peerDatabaseID: hello.databaseID))
        if configuration.direction.pulls { try beginPull() }
    }

    // MARK: Pull (this node is the target)

    /// Starts another pass of a one-shot pull on this connection (`sync` on a `once` peer whose
    /// last pass finished): a fresh `checkpointGet` and `subscribe` from the checkpoint. Does
    /// nothing while a subscription is still active, when this node does not pull, or when the
    /// peer refused to be pulled from.
    public func pullAgain() {
        guard !isClosed, configuration.direction.pulls, peerDatabaseID != nil, pull.canStartAnotherPass else { return }
        pull = .idle
        pullCaughtUpOnce = false
        do { try beginPull() } catch { fail(error) }
    }

    private func beginPull() throws(ReplicationError) {
        guard let peerDatabaseID else { return }
        let replicationID = ReplicationIdentity.replicationID(source: peerDatabaseID, target: store.databaseIDBytes, filter: configuration.pullFilter)
        let local: ReplicationCheckpoint?
        do {
            local = ReplicationCheckpoint(json: try store.localGet(ReplicationIdentity.checkpointDocumentID(replicationID)))
        } catch { throw .store(error) }
        let requestID = allocateRequestID()
        pull = .awaitingCheckpoint(requestID: requestID, replicationID: replicationID, local: local)
        send(.checkpointGet(CheckpointGet(requestID: requestID, replicationID: replicationID)))
    }

    private func receiveCheckpoint(_ checkpoint: Checkpoint) throws(ReplicationError) {
        guard case .awaitingCheckpoint(let asked, let replicationID, let local) = pull, asked == checkpoint.requestID else {
            throw .invalidReference("checkpoint answers no request of ours")
        }
        let remote = checkpoint.value.flatMap { ReplicationCheckpoint(encoded: $0) }
        let since = ReplicationCheckpoint.startSequence(local: local, remote: remote)
        // Where the pull resumes is where it stands, before any batch: reported now, so a node
        // that restarts caught up does not show an unknown pull checkpoint until the next change.
        if since > 0 { onEvent(.pullCheckpoint(since)) }
        let requestID = allocateRequestID()
        let filter = configuration.pullFilter.wireFilter ?? ChangesFilter.none
        send(.subscribe(Subscribe(requestID: requestID, replicationID: replicationID, since: since,
                                  continuous: configuration.continuous, filter: filter)))
        let target = SubscriptionTarget(subscriptionID: requestID, replicationID: replicationID,
                                        filter: configuration.pullFilter, store: store, session: random.nextHexID(),
                                        since: since, localCheckpoint: local, namesRefusals: peerAcceptsRefusals)
        pull = .subscribed(target, ended: false)
    }

    private func receiveChanges(_ changes: Changes) throws(ReplicationError) {
        guard let target else { throw .invalidReference("changes without a subscription") }
        if changes.caughtUp && !configuration.continuous { pull.endSubscription() }
        send(.changesReply(try target.receive(changes)))
        // A batch that needed nothing is complete: the checkpoint it reaches is written next.
        writeNext()
        onEvent(.progress)
    }

    /// Hands a message's revisions to the check pipeline; they are written, in arrival order,
    /// when checked (at once with the inline worker).
    private func receiveRevisions(requestID: RequestID, final: Bool, revisions: [ReceivedRevision]) throws(ReplicationError) {
        guard let target else { throw .invalidReference("revisions without a subscription") }
        let foreign = try target.foreignRevisions(requestID: requestID, revisions: revisions)
        checks.submit(requestID: requestID, final: final, revisions: foreign)
    }

    /// Checked messages, in arrival order: they wait for the writer.
    private func writeChecked(_ group: [RevisionCheckPipeline.Checked]) {
        incoming.append(group)
        writeNext()
    }

    /// Unless a write is in flight, hands the writer the next transaction (`IncomingWrites`), with
    /// the checkpoint it reaches — or the checkpoint alone, when batches that needed nothing
    /// completed. A message whose check failed as a whole is a protocol violation once the
    /// messages before it were written. A batch's last message is acknowledged after its
    /// transaction committed.
    private func writeNext() {
        guard !isClosed, let target else { return }
        do throws(ReplicationError) {
            let messages: [SubscriptionTarget.CheckedMessage]
            switch incoming.nextWrite() {
            case .none: return
            case .failed(let requestID, let problem): try target.refuse(requestID: requestID, problem: problem)
            case .checkpointOnly: messages = []
            case .write(let group): messages = group
            }
            guard let write = try target.prepareWrite(messages) else { return }
            incoming.writeStarted()
            let writtenTarget = ObjectIdentifier(target)
            writer.run({ write.perform() }) { [weak self] result in
                self?.written(write, result: result, for: writtenTarget)
            }
        } catch {
            fail(error)
        }
    }

    /// The writer finished `write`: acknowledge, report, and start the next one.
    private func written(
        _ write: SubscriptionTarget.Write, result: Result<[DocumentEvent], ReplicationError>, for writtenTarget: ObjectIdentifier
    ) {
        incoming.writeFinished()
        // A session closed meanwhile sends nothing more; what committed stays (the checkpoint
        // with it), and the peer sends the unacknowledged batches again next time. (The target
        // is not replaced while its batches are pending, so it is the one written for.)
        guard !isClosed, let target, ObjectIdentifier(target) == writtenTarget else { return }
        switch result {
        case .success(let events):
            let (acks, completion) = target.finish(write, events: events)
            for ack in acks { send(.revisionsAck(ack)) }
            report(completion, target: target)
            writeNext()
        case .failure(let error):
            fail(error)
        }
    }

    private func report(_ completion: SubscriptionTarget.Completion, target: SubscriptionTarget) {
        reportDocuments(completion.events)
        if let sequence = completion.checkpoint {
            onEvent(.pullCheckpoint(sequence))
            if remoteCheckpoint.batchCompleted(caughtUp: completion.caughtUp) { sendRemoteCheckpoint(target) }
        }
        if completion.caughtUp {
            pullCaughtUpOnce = true
            onEvent(.pullCaughtUp)
            startConfirmationPullIfDue()
        }
        // Once per batch, so observers refresh progress and idleness here and not per document.
        onEvent(.progress)
        if drainCompletion != nil { finishDrainIfIdle() }
    }

    /// Reports a batch's document events as one `.documents` event, in their order; nothing when
    /// there are none.
    private func reportDocuments(_ events: [DocumentEvent]) {
        if !events.isEmpty { onEvent(.documents(events)) }
    }

    /// Sends the peer a copy of the target's checkpoint (`RemoteCheckpointer` said it is due).
    private func sendRemoteCheckpoint(_ target: SubscriptionTarget) {
        guard let checkpoint = target.currentCheckpoint else { return }
        let requestID = allocateRequestID()
        remoteCheckpoint.sent(requestID)
        send(.checkpointSet(CheckpointSet(requestID: requestID, replicationID: target.replicationID, value: checkpoint.encoded())))
    }

    /// The peer stored our checkpoint: send the newest one if batches completed meanwhile.
    private func receiveCheckpointSetAck() {
        if remoteCheckpoint.acknowledged(), let target { sendRemoteCheckpoint(target) }
        if drainCompletion != nil { finishDrainIfIdle() }
    }

    // MARK: Push (this node is the source)

    private var outbox: Pusher.Outbox { Pusher.Outbox(nextRequestID: allocateRequestID, send: send) }

    private func receiveSubscribe(_ subscribe: Subscribe) throws(ReplicationError) {
        reportPush(try pusher.subscribe(
            subscribe, peerWindow: peerWindow, marksImportedIDs: peerAcceptsImportedIDs, pumping: drainCompletion == nil, outbox))
    }

    private func receiveUnsubscribe(_ unsubscribe: Unsubscribe) throws(ReplicationError) {
        reportPush(try pusher.unsubscribe(unsubscribe, pumping: drainCompletion == nil, outbox))
    }

    private func receiveChangesReply(_ reply: ChangesReply) throws(ReplicationError) {
        reportPush(try pusher.receive(reply, pumping: drainCompletion == nil, outbox))
        onEvent(.progress)
    }

    private func receiveRevisionsAck(_ ack: RevisionsAck) throws(ReplicationError) {
        reportPush(try pusher.receive(ack, pumping: drainCompletion == nil, outbox))
        startConfirmationPullIfDue()
        onEvent(.progress)
    }

    private func localChangesCommitted() {
        guard !isClosed else { return }
        do { reportPush(try pusher.localChangesCommitted(pumping: drainCompletion == nil, outbox)) } catch { fail(error) }
    }

    /// Reports what a push step did; a draining session closes once nothing is in flight.
    private func reportPush(_ report: Pusher.Report) {
        reportDocuments(report.documents)
        if report.completed { onEvent(.pushCompleted) }
        if drainCompletion != nil { finishDrainIfIdle() }
    }

    // MARK: Checkpoints the peer keeps here

    private func answerCheckpointGet(_ get: CheckpointGet) throws(ReplicationError) {
        let value: JSONValue?
        do { value = try store.localGet(ReplicationIdentity.checkpointDocumentID(get.replicationID)) } catch { throw .store(error) }
        let checkpoint = ReplicationCheckpoint(json: value)
        send(.checkpoint(Checkpoint(requestID: get.requestID, value: checkpoint?.encoded())))
    }

    private func storeRemoteCheckpoint(_ set: CheckpointSet) throws(ReplicationError) {
        guard let checkpoint = ReplicationCheckpoint(encoded: set.value) else {
            send(.error(ErrorMessage(requestID: set.requestID, code: .invalidDocument, message: "checkpoint value is not a Canopy checkpoint")))
            return
        }
        do {
            try store.localPut(ReplicationIdentity.checkpointDocumentID(set.replicationID), body: checkpoint.json)
            try recordPeerHorizon(set.replicationID, claimed: checkpoint.current.sequence)
        } catch { throw .store(error) }
        send(.checkpointSetAck(CheckpointSetAck(requestID: set.requestID)))
    }

    /// Tells the store how far the peer holds our changes, so stemming keeps what it may still
    /// hold as leaves (`DocumentStore.recordPeerHorizon`). The peer's checkpoint is its claim; it
    /// is capped by what this session saw the peer acknowledge, so a peer cannot make this node
    /// stem what it never received.
    private func recordPeerHorizon(_ replicationID: [UInt8], claimed: UInt64) throws(StoreError) {
        guard let observed = pusher.acknowledgedSequence else { return }
        let sequence = min(claimed, observed)
        let peer = configuration.peerHorizonKey ?? Hex.encode(replicationID)
        try store.recordPeerHorizon(peer: peer, sequence: Int64(clamping: sequence))
    }

    private func receiveError(_ error: ErrorMessage) throws(ReplicationError) {
        if let target, target.subscriptionID == error.requestID {
            // A refused pull is a configuration the peer chose (it does not push to us), not a
            // broken connection: the push direction goes on, and the refusal is reported.
            pull = .refused("\(error.code): \(error.message)")
            logger.warning("the peer refused to be pulled from", metadata: ["code": "\(error.code)", "message": "\(error.message)"])
            onEvent(.pullRefused("\(error.code): \(error.message)"))
            if drainCompletion != nil { finishDrainIfIdle() }
            return
        }
        if remoteCheckpoint.refused(error.requestID) {
            // The peer refused to store our checkpoint: the next completed batch tries again.
            if drainCompletion != nil { finishDrainIfIdle() }
        }
        logger.warning("peer reported an error", metadata: ["code": "\(error.code)", "message": "\(error.message)"])
    }

    // MARK: Heartbeats, sending, failure

    private func scheduleHeartbeat() {
        heartbeatTimer = scheduler.schedule(after: configuration.heartbeatIntervalSeconds) { [weak self] in
            self?.heartbeat()
        }
    }

    private func heartbeat() {
        guard !isClosed else { return }
        let now = scheduler.now
        if now - lastReceived >= configuration.heartbeatIntervalSeconds * configuration.deadPeerIntervals {
            perform(machine.close(code: .timeout, reason: "no message for \(Int(now - lastReceived)) s"))
            finish(.failed("peer silent for \(Int(now - lastReceived)) s"))
            transport.close(.failed("dead peer"))
            return
        }
        if now - lastSent >= configuration.heartbeatIntervalSeconds * 0.5 { send(.heartbeat) }
        scheduleHeartbeat()
    }

    /// Sends a message the engine made, recording it in the state machine first.
    private func send(_ message: Message) {
        guard !isClosed else { return }
        machine.send(message)
        transmit(message)
    }

    /// Puts a message on the transport.
    private func transmit(_ message: Message) {
        guard !isClosed else { return }
        lastSent = scheduler.now
        messagesSent += 1
        transport.send(message)
    }

    private func allocateRequestID() -> RequestID {
        defer { nextRequestID += 1 }
        return nextRequestID
    }

    private func fail(_ error: ReplicationError) {
        guard !isClosed else { return }
        logger.warning("replication session failed", metadata: ["error": "\(error)"])
        let reason: TransportCloseReason
        switch error {
        case .protocolViolation(let violation):
            perform(machine.fail(violation))
            reason = .protocolViolation("\(violation)")
        case .rejectedDocument(let documentID, let detail):
            reportDocuments([DocumentEvent(kind: .rejected, documentID: documentID ?? "", detail: detail)])
            let violation = ProtocolError.invalidDocument(detail: detail)
            perform(machine.fail(violation))
            reason = .protocolViolation("\(violation)")
        case .peerRejected(let detail), .disconnected(let detail):
            perform(machine.close(code: .normal, reason: detail))
            reason = .failed(detail)
        case .store(let storeError):
            perform(machine.close(code: .storageFailure, reason: "storage failure"))
            reason = .failed("store: \(storeError)")
        }
        finish(reason)
        transport.close(reason)
    }

    private func finish(_ reason: TransportCloseReason) {
        guard !isClosed else { return }
        isClosed = true
        checks.cancel()
        incoming.removeAll()
        heartbeatTimer?.cancel()
        commitObserver?.cancel()
        commitObserver = nil
        onEvent(.closed(reason))
    }
}
