import CanopyCore
import CanopyStore
import CanopyWire
import DequeModule
import Logging

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
///
/// It is the driver of pure parts: `ConnectionStateMachine` (message rules), `Puller` (our
/// subscription, incoming writes, the peer's copy of our checkpoint), `Pusher` (the peer's
/// subscriptions), `PeerCheckpointKeeper` and `Liveness`. This file holds its state, message
/// dispatch, draining and failure; the pull and push drivers are in `ReplicationSession+Pull`
/// and `+Push`, which is why the members they use are internal rather than private: nothing
/// else in the module touches them.
package final class ReplicationSession: @unchecked Sendable {
    let store: any ReplicationStore
    private let transport: any MessageTransport
    let scheduler: any ReplicationScheduler
    let random: any RandomSource
    let configuration: ReplicationConfiguration
    let logger: Logger
    let onEvent: @Sendable (SessionEvent) -> Void

    private var nextRequestID: RequestID = 1
    /// The message-level rules (CanopyWire): every message in and out passes through it.
    private(set) var machine: ConnectionStateMachine
    /// The peer's `hello`, once it arrived: its database id, window and features (`importedIDs`:
    /// revisions with imported ids are sent marked; `refusals`: acks may name refused documents).
    var peerHello: Hello?
    var peerDatabaseID: [UInt8]? { peerHello?.databaseID }
    /// This node as the source: the peer's subscriptions.
    var pusher: Pusher
    /// This node as the target: its subscription, the incoming writes, the peer's checkpoint copy.
    var puller: Puller
    private var liveness: Liveness
    private var heartbeatTimer: (any Cancellable)?
    /// The next look at revisions set aside for content (`recheckSetAside`).
    var setAsideRecheckTimer: (any Cancellable)?
    /// When a recheck first saw content the peer could not send (asked for again
    /// `AttachmentFetches.unavailableRetrySeconds` later).
    var unavailableSeenAt: Double?
    private var commitObserver: StoreObserverToken?
    /// Received revisions being checked off the serial context, written in arrival order.
    let checks: RevisionCheckPipeline
    /// Attachment content this node fetches from the peer (`ReplicationSession+Attachments`).
    var fetches = AttachmentFetches()
    /// Peer horizons waiting for the revisions received before them to be written.
    var horizonBarrier = PeerHorizonBarrier<PeerCheckpointKeeper.Horizon>()
    /// The peer's subscriptions held until this node's pull caught up once (`holdsPeerSubscriptions`).
    var heldSubscribes: [Subscribe] = []
    /// Content the peer was found allowed to read (`peerMayRead`), so that each part of it is
    /// not looked up again.
    var readableAttachments: Set<AttachmentDigest> = []
    /// Content being served in order from its start, with how far it was hashed
    /// (`servedPartIsSound`).
    var servedHashes: [AttachmentDigest: (next: Int64, stream: Blake2bStream)] = [:]
    /// Compares this node runs against the peer (`ReplicationSession+Digests`).
    var digestRuns: [DigestCompareRun] = []
    /// Contents whose serving is followed at once; a peer asking for more starts forgets one.
    static let servedHashesMax = 16
    /// Where the store writes of received revisions run (`ReplicationWorker`): off the serial
    /// context in the agent, so that the session keeps answering `changes` (read from the
    /// store's snapshot connection) while a transaction runs.
    let writer: any ReplicationWorker
    /// Where fetched attachment parts are written and hashed (`ReplicationSession+Attachments`):
    /// the checks' worker, off the serial context.
    let partWriter: any ReplicationWorker
    public private(set) var isClosed = false
    /// A violation by the peer was reported (`.protocolViolated`): at most once per session.
    private var violationReported = false
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
        partWriter = worker
        pusher = Pusher(store: store, configuration: configuration)
        puller = Puller(store: store, configuration: configuration)
        checks = RevisionCheckPipeline(worker: worker)
        liveness = Liveness(
            intervalSeconds: configuration.heartbeatIntervalSeconds, deadIntervals: configuration.deadPeerIntervals, now: scheduler.now)
        machine = ConnectionStateMachine(localHello: Hello(
            features: (configuration.direction.pulls ? Hello.subscribesFeature : 0)
                | (Self.pullsFirst(configuration) ? Hello.pullsFirstFeature : 0) | Hello.importedIDsFeature
                | Hello.refusalsFeature | Hello.attachmentsFeature | Hello.digestsFeature, databaseID: store.databaseIDBytes, revsLimit: min(store.revsLimit, WireLimits.revsLimitMax),
            window: configuration.window))
        checks.deliver = { [weak self] checked in self?.writeChecked(checked) }
    }

    /// Progress of our subscription to the peer (pull).
    public var pullProgress: ReplicationProgress { puller.progress }
    /// Progress of the peer's subscriptions to us (push), summed.
    public var pushProgress: ReplicationProgress { pusher.progress }
    /// The newest local sequence the peer has completed through its subscriptions (nil when the
    /// peer has not subscribed).
    public var pushAcknowledgedSequence: UInt64? { pusher.acknowledgedSequence }

    /// True until the session has exchanged hellos and (when it pulls) caught up with the peer
    /// once, and afterwards while batches are in flight in either direction.
    public var isBusy: Bool {
        if isClosed { return false }
        if peerDatabaseID == nil || puller.state.awaitingCheckpoint { return true }
        if configuration.direction.pulls && !pullRefused && !pullCaughtUpOnce { return true }
        if confirmationPullDue { return true }
        return pusher.awaitingSubscription || !puller.isDrained || !pusher.isDrained || !fetches.isIdle
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
    func startConfirmationPullIfDue() {
        guard confirmationPullDue, pullCaughtUpOnce, puller.state.subscriptionEnded, !puller.hasBatchesInFlight,
            pusher.isDrained, drainCompletion == nil
        else { return }
        confirmationPullStarted = true
        pullAgain()
    }

    /// Whether our subscription reached the peer's end at least once (in this pass).
    public var pullCaughtUpOnce: Bool { puller.caughtUpOnce }
    /// Whether the peer refused our subscription.
    public var pullRefused: Bool { puller.state.isRefused }

    /// The peer's database id, once its `hello` arrived.
    public var peerDatabase: [UInt8]? { peerDatabaseID }

    /// Whether a session of `configuration` pulls before it serves the peer: its replicator has a
    /// resolver of its own, which then decides the conflicts that the peer's revisions create
    /// here (as Couchbase Lite's client resolver decides for its pulls), before the peer's policy
    /// can settle this node's revisions on the other side (`Hello.pullsFirstFeature`).
    static func pullsFirst(_ configuration: ReplicationConfiguration) -> Bool {
        configuration.direction.pulls && configuration.direction.pushes && configuration.conflictPolicy != nil
    }

    /// True while the peer's subscriptions wait for this node's pull to catch up once
    /// (`pullsFirst`; when both sides pull first, the one with the lower database id waits).
    var holdsPeerSubscriptions: Bool {
        guard Self.pullsFirst(configuration), let hello = peerHello, !pullCaughtUpOnce, !pullRefused else { return false }
        guard hello.features & Hello.pullsFirstFeature != 0 else { return true }
        return store.databaseIDBytes.lexicographicallyPrecedes(hello.databaseID)
    }

    /// What the peer takes of this node's changes, when this node pushes and the peer's `hello`
    /// arrived: nothing when it said it will not subscribe, else what its subscription asks for
    /// (everything until it has subscribed).
    public var peerIntake: PeerIntake? {
        guard configuration.direction.pushes, let hello = peerHello else { return nil }
        guard hello.features & Hello.subscribesFeature != 0 else { return .nothing }
        switch pusher.subscribedFilter {
        case .idPrefix(let prefix)?: return .prefix(prefix)
        case .docIDs(let ids)?: return .documentIDs(ids.count)
        case .some(ChangesFilter.none), nil: return .everything
        }
    }

    /// Sends `hello`, starts heartbeats and listens for commits. Must run on the serial context.
    public func start() {
        scheduler.assertOnContext()
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
        scheduler.assertOnContext()
        guard !isClosed else { return completion() }
        drainCompletion = completion
        puller.stopSubscription(outbox)
        drainTimer = scheduler.schedule(after: timeoutSeconds) { [weak self] in
            guard let self, let completion = self.drainCompletion else { return }
            self.drainCompletion = nil
            self.close(code: .goingAway, reason: "shutting down")
            completion()
        }
        finishDrainIfIdle()
    }

    var drainCompletion: (@Sendable () -> Void)?
    private var drainTimer: (any Cancellable)?

    /// While draining: closes once nothing is in flight in either direction.
    func finishDrainIfIdle() {
        guard let completion = drainCompletion, !isClosed else { return }
        // The peer's copy of our checkpoint must be current too, or the next session resumes from
        // the older of the two: wait for the last `checkpointSet` (and the one it deferred).
        let inFlight = puller.hasBatchesInFlight || pusher.hasBatchesInFlight || !puller.checkpointCopySettled
        guard !inFlight else { return }
        drainCompletion = nil
        drainTimer?.cancel()
        close(code: .goingAway, reason: "shutting down")
        completion()
    }

    /// Closes the session gracefully (`close` then the transport's FINAL).
    public func close(code: ErrorCode = .normal, reason: String = "done") {
        scheduler.assertOnContext()
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
            liveness.received(at: scheduler.now)
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
                    if let violation = machine.violation { reportViolation("\(violation)") }
                    if machine.violation == nil && code == .storageFailure {
                        onEvent(.storeFailed(local: false, "the peer could not store what this node sent (its disk may be full); it closed with \(code)"))
                    }
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
        case .error(let error): if !receiveAttachmentError(error) && !receiveDigestError(error) { try receiveError(error) }
        case .attachmentGet(let get): answerAttachmentGet(get)
        case .attachmentPart(let part): try receiveAttachmentPart(part)
        case .digestGet(let get): answerDigestGet(get)
        case .digestNodes(let nodes): try receiveDigestNodes(nodes)
        }
    }

    private func receiveHello(_ hello: Hello) throws(ReplicationError) {
        peerHello = hello
        pusher.peerSaidHello(subscribes: hello.features & Hello.subscribesFeature != 0)
        onEvent(.connected(peerDatabaseID: hello.databaseID))
        if configuration.direction.pulls { try beginPull() }
        if attachmentsAgreed && configuration.direction.pulls {
            // Content set aside by earlier sessions: what arrived meanwhile is merged, the rest fetched.
            settleReadyAtStart()
            refreshAwaitedAttachments(force: true)
            scheduleSetAsideRecheck()
        }
    }

    // MARK: Heartbeats, sending, failure

    private func scheduleHeartbeat() {
        heartbeatTimer = scheduler.schedule(after: configuration.heartbeatIntervalSeconds) { [weak self] in
            self?.heartbeat()
        }
    }

    private func heartbeat() {
        guard !isClosed else { return }
        switch liveness.tick(at: scheduler.now) {
        case .peerDead(let silent):
            perform(machine.close(code: .timeout, reason: "no message for \(silent) s"))
            finish(.failed("peer silent for \(silent) s"))
            transport.close(.failed("dead peer"))
            return
        case .sendHeartbeat:
            send(.heartbeat)
        case .none:
            break
        }
        scheduleHeartbeat()
    }

    /// Sends a message the engine made, recording it in the state machine first.
    func send(_ message: Message) {
        guard !isClosed else { return }
        machine.send(message)
        transmit(message)
    }

    /// Puts a message on the transport.
    private func transmit(_ message: Message) {
        guard !isClosed else { return }
        liveness.sent(at: scheduler.now)
        messagesSent += 1
        transport.send(message)
    }

    func allocateRequestID() -> RequestID {
        defer { nextRequestID += 1 }
        return nextRequestID
    }

    func fail(_ error: ReplicationError) {
        guard !isClosed else { return }
        if case .store = error {
            // Retried by the owner, which counts and reports it: a full disk would otherwise
            // write this line at every retry.
            logger.debug("replication session failed", metadata: ["error": "\(error)"])
        } else {
            logger.warning("replication session failed", metadata: ["error": "\(error)"])
        }
        let reason: TransportCloseReason
        switch error {
        case .protocolViolation(let violation):
            reportViolation("\(violation)")
            perform(machine.fail(violation))
            reason = .protocolViolation("\(violation)")
        case .rejectedDocument(let documentID, let detail):
            reportDocuments([DocumentEvent(kind: .rejected, documentID: documentID ?? "", detail: detail)])
            let violation = ProtocolError.invalidDocument(detail: detail)
            reportViolation("\(violation)")
            perform(machine.fail(violation))
            reason = .protocolViolation("\(violation)")
        case .peerRejected(let detail), .disconnected(let detail), .notShared(let detail):
            perform(machine.close(code: .normal, reason: detail))
            reason = .failed(detail)
        case .store(let storeError):
            perform(machine.close(code: .storageFailure, reason: "storage failure"))
            reason = .failed("store: \(storeError)")
            onEvent(.storeFailed(local: true, "store: \(storeError)"))
        }
        finish(reason)
        transport.close(reason)
    }

    /// Tells the owner, once, that the peer broke the protocol.
    private func reportViolation(_ detail: String) {
        guard !violationReported, !isClosed else { return }
        violationReported = true
        onEvent(.protocolViolated(detail))
    }

    private func finish(_ reason: TransportCloseReason) {
        guard !isClosed else { return }
        isClosed = true
        checks.cancel()
        puller.sessionEnded()
        fetches.removeAll()
        endCompares()
        heartbeatTimer?.cancel()
        setAsideRecheckTimer?.cancel()
        commitObserver?.cancel()
        commitObserver = nil
        onEvent(.closed(reason))
    }
}
