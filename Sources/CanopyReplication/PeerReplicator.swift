import CanopyCore
import CanopyStore
import CanopyWire
import Logging

/// Opens connections to one peer. The agent dials TCP and runs the handshake; the simulator
/// connects simulated links. The completion runs on the replicator's serial context.
public protocol PeerDialer: AnyObject, Sendable {
    /// Opens a connection; calls `completion` exactly once.
    func dial(_ completion: @escaping @Sendable (Result<any MessageTransport, ReplicationError>) -> Void)
}

/// A snapshot of a peer's replication, for `status` and events.
public struct PeerStatus: Sendable, Equatable {
    /// The activity level.
    public var state: ReplicatorState
    /// True while a session is open.
    public var connected: Bool
    /// Progress receiving the peer's changes.
    public var pull: ReplicationProgress
    /// Progress sending ours.
    public var push: ReplicationProgress
    /// The newest peer sequence durably received.
    public var lastPulledSequence: UInt64?
    /// The newest local sequence the peer acknowledged.
    public var lastPushedSequence: UInt64?
    /// Why the last session ended badly, if it did; cleared when a new session with the peer
    /// starts.
    public var lastError: String?
    /// What the peer takes of this node's changes on the open session, when this node pushes
    /// (nil before the peer's `hello`, and when this node does not push).
    public var peerIntake: PeerIntake?
    /// Sessions in a row that ended because a store failed: this node's (a full disk, an I/O
    /// error) or the peer's (it closed saying so); back to 0 once a batch completes again.
    /// While above 0 the replicator redials on `storeFailureBackoff`, which a new connection
    /// does not reset.
    public var storeFailures = 0
    /// Sessions with the peer that this replicator closed because the peer broke the protocol,
    /// since it started, and what the last one found.
    public var protocolViolations = 0
    public var lastProtocolViolation: String?
}

/// Replication with one configured peer over successive connections (`Protocol/design.md` §4): dials (when
/// it has a dialer), accepts inbound connections, retries an unreachable or failed peer with
/// exponential backoff and jitter, and reports state, progress and document events.
///
/// All methods must be called on the scheduler's serial context.
public final class PeerReplicator: @unchecked Sendable {
    public let peerName: String
    private let store: any ReplicationStore
    private let dialer: (any PeerDialer)?
    private let scheduler: any ReplicationScheduler
    /// Where each session checks and writes received revisions (inline unless the host injects a
    /// worker).
    private let worker: any ReplicationWorker
    private let random: any RandomSource
    private let configuration: ReplicationConfiguration
    private let logger: Logger
    private let onStatus: @Sendable (PeerStatus) -> Void
    private let onDocumentEvents: @Sendable ([DocumentEvent]) -> Void

    private var backoff: Backoff
    /// The redial schedule while this node's store fails (`PeerStatus.storeFailures`): the
    /// connection works, so `backoff` would start again from its first delay at every
    /// connection, and a full disk redialled every half second.
    private var storeFailureBackoff: Backoff
    /// Whose store failed last while `status.storeFailures` is above 0: this node's (true) is
    /// seen working again by a batch written here, the peer's by a batch it acknowledges.
    private var localStoreFailed = true
    private var session: ReplicationSession?
    private var retryTimer: (any Cancellable)?
    private var dialing = false
    private var stopped = true
    /// The peer's database id from the last `hello` (for `resetCheckpoint` while disconnected).
    private var lastPeerDatabase: [UInt8]?
    /// The syncs waiting, in the order they were asked for, each with the id `sync` returned.
    private var syncWaiters: [(id: Int, done: @Sendable (Result<Void, ReplicationError>) -> Void)] = []
    private var nextSyncWaiter = 0
    /// One-shot: a sync was asked for while a pass was running. That pass may have read the
    /// feeds before what the caller wrote, so it does not complete the sync: another pass follows.
    private var anotherPassWanted = false
    /// True while this replicator closes its session to put another in its place (a newer
    /// connection, or another one-shot pass): that close does not fail the sync waiters, who wait
    /// for the new session.
    private var replacingSession = false
    public private(set) var status = PeerStatus(state: .stopped, connected: false, pull: .init(), push: .init())

    /// Creates a replicator; call `start()` to begin.
    public convenience init(
        peerName: String, store: DocumentStore, dialer: (any PeerDialer)?, scheduler: any ReplicationScheduler,
        random: any RandomSource, configuration: ReplicationConfiguration, backoff: Backoff = Backoff(),
        storeFailureBackoff: Backoff = PeerReplicator.defaultStoreFailureBackoff,
        logger: Logger, worker: any ReplicationWorker = InlineReplicationWorker(),
        onStatus: @escaping @Sendable (PeerStatus) -> Void = { _ in },
        onDocumentEvents: @escaping @Sendable ([DocumentEvent]) -> Void = { _ in }
    ) {
        self.init(
            peerName: peerName, replicating: store, dialer: dialer, scheduler: scheduler, random: random,
            configuration: configuration, backoff: backoff, storeFailureBackoff: storeFailureBackoff, logger: logger,
            worker: worker, onStatus: onStatus, onDocumentEvents: onDocumentEvents)
    }

    /// The default redial schedule while the store fails: from 1 s, doubling, up to 10 s (a disk
    /// made room on is caught up within that, and a full one costs a connection every 10 s).
    public static let defaultStoreFailureBackoff = Backoff(initialSeconds: 1, maximumSeconds: 10, jitter: 0.5)

    /// Creates a replicator of any `ReplicationStore`; call `start()` to begin.
    package init(
        peerName: String, replicating store: any ReplicationStore, dialer: (any PeerDialer)?, scheduler: any ReplicationScheduler,
        random: any RandomSource, configuration: ReplicationConfiguration, backoff: Backoff = Backoff(),
        storeFailureBackoff: Backoff = PeerReplicator.defaultStoreFailureBackoff,
        logger: Logger, worker: any ReplicationWorker = InlineReplicationWorker(),
        onStatus: @escaping @Sendable (PeerStatus) -> Void = { _ in },
        onDocumentEvents: @escaping @Sendable ([DocumentEvent]) -> Void = { _ in }
    ) {
        self.storeFailureBackoff = storeFailureBackoff
        self.peerName = peerName
        self.store = store
        self.dialer = dialer
        self.scheduler = scheduler
        self.random = random
        var configuration = configuration
        if configuration.peerHorizonKey == nil { configuration.peerHorizonKey = Self.peerHorizonKey(peerName) }
        self.configuration = configuration
        self.backoff = backoff
        self.logger = logger
        self.worker = worker
        self.onStatus = onStatus
        self.onDocumentEvents = onDocumentEvents
    }

    /// The open session, if any.
    package var currentSession: ReplicationSession? { session }

    /// The peer-horizon name of the peer called `peerName` (see `ReplicationConfiguration.peerHorizonKey`).
    public static func peerHorizonKey(_ peerName: String) -> String { "peer/" + peerName }

    /// Starts replicating: dials at once when it has a dialer, else waits for `accept`.
    ///
    /// A peer this node pushes to and that has no horizon yet gets horizon 0: until it has caught
    /// up once it may hold any revision (from other peers), so stemming keeps everything it might
    /// offer back (`Protocol/design.md` §2.7).
    ///
    /// A replicator whose configuration has its own `conflictPolicy` that settles kept conflicts
    /// first offers it every conflict the store keeps (one its resolver threw on before, say),
    /// reporting what it settled or failed to as document events.
    public func start() {
        scheduler.assertOnContext()
        if configuration.direction.pushes, let key = configuration.peerHorizonKey {
            do { try store.recordPeerHorizon(peer: key, sequence: 0) } catch {
                logger.warning("could not record the peer's horizon", metadata: ["peer": "\(peerName)", "error": "\(error)"])
            }
        }
        if stopped, let policy = configuration.conflictPolicy, policy.settlesKeptConflicts { retryKeptConflicts(policy) }
        stopped = false
        if session == nil { connect() }
        publish()
    }

    /// Settles the store's kept conflicts with `policy`, reporting what it did even if this
    /// replicator is stopped and released meanwhile: the writes happened.
    private func retryKeptConflicts(_ policy: ConflictPolicy) {
        let (report, logger, peerName) = (onDocumentEvents, logger, peerName)
        worker.run({ [store] in
            Result { () throws(StoreError) in try store.retryConflictResolution(policy: policy) }
        }, then: { result in
            switch result {
            case .success(let results):
                let events = results.flatMap(DocumentEvent.scanEvents)
                if !events.isEmpty { report(events) }
            case .failure(let error):
                logger.warning("the kept conflicts could not be offered to the replicator's resolver",
                               metadata: ["peer": "\(peerName)", "error": "\(error)"])
            }
        })
    }

    /// Stops: closes the session cleanly and cancels retries.
    public func stop() {
        scheduler.assertOnContext()
        stopped = true
        retryTimer?.cancel()
        retryTimer = nil
        session?.close(code: .goingAway, reason: "replication stopped")
        session = nil
        failWaiters(.disconnected("replication stopped"))
        setState(.stopped)
    }

    /// Stops after finishing the batches in flight (see `ReplicationSession.drainAndClose`), then
    /// calls `completion`.
    public func stopGracefully(timeoutSeconds: Double, _ completion: @escaping @Sendable () -> Void) {
        scheduler.assertOnContext()
        stopped = true
        retryTimer?.cancel()
        retryTimer = nil
        failWaiters(.disconnected("replication stopped"))
        guard let session else {
            setState(.stopped)
            return completion()
        }
        session.drainAndClose(timeoutSeconds: timeoutSeconds) { [weak self] in
            self?.session = nil
            self?.setState(.stopped)
            completion()
        }
    }

    /// Takes an inbound connection from the peer (already authenticated). An open session is
    /// replaced: the agent applies the simultaneous-connect rule before calling this.
    public func accept(_ transport: any MessageTransport) {
        scheduler.assertOnContext()
        guard !stopped else {
            transport.close(.localClosed)
            return
        }
        retryTimer?.cancel()
        retryTimer = nil
        if let old = session {
            session = nil
            replacingSession = true
            old.close(code: .replaced, reason: "replaced by a newer connection")
            replacingSession = false
        }
        open(transport)
    }

    /// Replicates once and calls `completion` when both directions are caught up (or failed).
    /// Connects first if needed; a continuous session stays open afterwards. Returns an id for
    /// `cancelSync`.
    ///
    /// A one-shot session whose pass finished is replaced by a new connection: replication is
    /// receiver-driven, and the peer's one-shot subscription to this node ended with the pass, so
    /// only a new connection makes the peer pull (and this node push) again. A one-shot pass
    /// still running does not complete the sync (it may have read the feeds before the caller's
    /// last writes): a new pass follows it. Without a dialer (the peer only connects to us) the
    /// session is closed and the waiters wait for the peer's next connection, which its
    /// replicator makes after a moment.
    ///
    /// The sync fails at once when the peer refuses the database's channel (`notShared`): it
    /// does not replicate the database with this node, so there is nothing to wait for.
    @discardableResult
    public func sync(_ completion: @escaping @Sendable (Result<Void, ReplicationError>) -> Void) -> Int {
        scheduler.assertOnContext()
        let id = nextSyncWaiter
        nextSyncWaiter += 1
        syncWaiters.append((id, completion))
        if stopped { stopped = false }
        if session == nil && !dialing {
            retryTimer?.cancel()
            retryTimer = nil
            connect()
        } else if let session, !configuration.continuous {
            guard !session.isBusy else {
                anotherPassWanted = true
                return id
            }
            startAnotherPass(session)
            return id
        }
        checkSyncDone()
        return id
    }

    /// Forgets the sync `id` without calling its completion (its caller went away); the
    /// replication itself goes on as configured.
    public func cancelSync(_ id: Int) {
        scheduler.assertOnContext()
        syncWaiters.removeAll { $0.id == id }
        if syncWaiters.isEmpty { anotherPassWanted = false }
    }

    /// Replaces the one-shot session with a new connection, for a new pass.
    private func startAnotherPass(_ session: ReplicationSession) {
        anotherPassWanted = false
        replacingSession = true
        session.close(code: .normal, reason: "starting another one-shot pass")
        replacingSession = false
        connect()
    }

    /// A connection to the peer became available (it connected to this node): a replicator with
    /// no session that waits to retry tries at once instead of after its backoff.
    package func connectNow() {
        scheduler.assertOnContext()
        guard !stopped, session == nil, !dialing else { return }
        retryTimer?.cancel()
        retryTimer = nil
        connect()
    }

    /// Forgets this node's checkpoint for pulling from the peer (CouchDB's and Couchbase Lite's
    /// `resetCheckpoint`): the next pull starts from sequence 0, re-checking every document (only
    /// what is missing is transferred). Takes effect on the next connection; returns false when
    /// the peer's database is not known yet (never connected).
    @discardableResult
    public func resetCheckpoint() throws(StoreError) -> Bool {
        scheduler.assertOnContext()
        guard let peerDatabase = session?.peerDatabase ?? lastPeerDatabase else { return false }
        let replicationID = ReplicationIdentity.replicationID(source: peerDatabase, target: store.databaseIDBytes, filter: configuration.pullFilter)
        _ = try store.localDelete(ReplicationIdentity.checkpointDocumentID(replicationID))
        status.lastPulledSequence = nil
        return true
    }

    /// The newest sequence of this node's the peer acknowledged having (its push checkpoint, or
    /// the session's newer acknowledgement); nil when it never acknowledged anything.
    public var acknowledgedPushSequence: UInt64? {
        scheduler.assertOnContext()
        return session?.pushAcknowledgedSequence ?? status.lastPushedSequence
    }

    /// Compares this node's documents with the peer's over the current session
    /// (`ReplicationSession.compareDigests`); `.disconnected` when no session has exchanged
    /// hellos. `completion` runs on the serial context.
    package func compareDigests(
        prefix: String, differencesMax: Int, timeoutSeconds: Double,
        _ completion: @escaping @Sendable (Result<DigestCompareOutcome, DigestCompareFailure>) -> Void
    ) {
        scheduler.assertOnContext()
        guard let session, !session.isClosed, session.peerDatabase != nil else { return completion(.failure(.disconnected)) }
        session.compareDigests(prefix: prefix, differencesMax: differencesMax, timeoutSeconds: timeoutSeconds, completion: completion)
    }

    /// Local documents changed since the newest sequence the peer acknowledged (all documents
    /// when it never acknowledged anything), at most `limit`.
    public func pendingDocumentIDs(limit: Int = 1000) throws(StoreError) -> [String] {
        scheduler.assertOnContext()
        let since = Int64(clamping: acknowledgedPushSequence ?? 0)
        return try store.changesPage(since: since, limit: limit).changes.map(\.documentID)
    }

    // MARK: Connections

    private func connect() {
        guard !stopped, let dialer, !dialing else {
            if dialer == nil { setState(.offline) }
            return
        }
        dialing = true
        setState(.connecting)
        dialer.dial { [weak self] result in
            guard let self else {
                // Stopped and released meanwhile: a channel that opened now belongs to nobody,
                // and the peer's session on it would wait for a hello until its timeout.
                if case .success(let transport) = result { transport.close(.localClosed) }
                return
            }
            self.dialing = false
            switch result {
            case .success(let transport):
                if self.stopped || self.session != nil {
                    transport.close(.localClosed)
                } else {
                    self.open(transport)
                }
            case .failure(.notShared(let detail)):
                self.status.lastError = "the peer does not share this database with this node (\(detail)); asked again with backoff"
                self.scheduleRetry(state: .unshared)
                self.failWaiters(.notShared(detail))
            case .failure(let error):
                self.status.lastError = "\(error)"
                self.scheduleRetry(state: .offline)
            }
        }
    }

    private func open(_ transport: any MessageTransport) {
        // A write that commits after this replicator is gone still reports its documents.
        let orphanedDocuments = onDocumentEvents
        let session = ReplicationSession(
            replicating: store, transport: transport, scheduler: scheduler, random: random,
            configuration: configuration, logger: logger, worker: worker, writer: worker
        ) { [weak self] event in
            if let self { return self.handle(event) }
            if case .documents(let events) = event { orphanedDocuments(events) }
        }
        self.session = session
        anotherPassWanted = false
        status.connected = true
        session.start()
        setState(.busy)
    }

    private func handle(_ event: SessionEvent) {
        switch event {
        case .connected(let peerDatabaseID):
            // Connecting proves the peer reachable, not that this node can store what it sends:
            // while the store fails, the schedule goes on growing.
            if status.storeFailures == 0 { backoff.reset() }
            lastPeerDatabase = peerDatabaseID
            // The peer is reachable and speaking the protocol again: an error of an earlier
            // connection no longer describes it.
            status.lastError = nil
        case .documents(let events):
            // A batch's events, one per document, passed on as one array: status and sync
            // completion change only with the batch's `.progress` event that follows, so the
            // refresh below would be pure cost here.
            return onDocumentEvents(events)
        case .pullCheckpoint(let sequence):
            // Only a checkpoint that moved was written (a session reports where it resumes too).
            if sequence > status.lastPulledSequence ?? 0 { storeWorks(local: true) }
            status.lastPulledSequence = sequence
        case .pullRefused(let reason):
            status.lastError = "the peer does not let this node pull from it (\(reason)): its share of this database with this node "
                + "does not allow reading (`canopyctl db list` there), or its direction for this node is pull"
        case .attachmentUnavailable(let reason):
            status.lastError = reason
        case .pullCaughtUp:
            storeWorks(local: true)
        case .pushCompleted, .progress:
            break
        case .protocolViolated(let detail):
            status.protocolViolations += 1
            status.lastProtocolViolation = detail
        case .storeFailed(let local, let detail):
            status.storeFailures += 1
            localStoreFailed = local
            status.lastError = detail
        case .closed(let reason):
            session = nil
            status.connected = false
            // A sync outlives a lost connection: the replicator reconnects and the waiters wait
            // for a session that completes (bounded by whoever waits: `canopyctl sync --timeout`).
            // Only this node closing the session (stop) or a protocol violation ends them.
            switch reason {
            case .localClosed:
                if !replacingSession { failWaiters(.disconnected("replication stopped")) }
            case .peerClosed:
                scheduleRetry(state: .offline)
            case .failed(let detail):
                status.lastError = detail
                scheduleRetry(state: .offline)
            case .protocolViolation(let detail):
                status.lastError = "protocol violation: \(detail)"
                scheduleRetry(state: .error)
                failWaiters(.disconnected(status.lastError ?? "protocol violation"))
            }
        }
        refreshFromSession()
        checkSyncDone()
    }

    /// This node's store (`local`) wrote a batch (the pull checkpoint moved) or the pull caught
    /// up, or the peer's acknowledged one (the push sequence moved): if that is the store that
    /// failed, it works again. A batch that completes is not proof by itself: one whose
    /// revisions were all here already writes nothing.
    private func storeWorks(local: Bool) {
        guard status.storeFailures > 0, local == localStoreFailed else { return }
        status.storeFailures = 0
        storeFailureBackoff.reset()
        backoff.reset()
    }

    private func scheduleRetry(state: ReplicatorState) {
        setState(state)
        guard !stopped, dialer != nil, retryTimer == nil else { return }
        let unit = random.nextUnit()
        let delay = status.storeFailures > 0 ? storeFailureBackoff.nextDelay(unit: unit) : backoff.nextDelay(unit: unit)
        retryTimer = scheduler.schedule(after: delay) { [weak self] in
            guard let self else { return }
            self.retryTimer = nil
            if self.session == nil { self.connect() }
        }
    }

    // MARK: Status

    private func refreshFromSession() {
        guard let session else { return publish() }
        status.pull = session.pullProgress
        status.push = session.pushProgress
        if let pushed = session.pushAcknowledgedSequence {
            if pushed > status.lastPushedSequence ?? 0 { storeWorks(local: false) }
            status.lastPushedSequence = pushed
        }
        status.peerIntake = session.peerIntake
        let busy = session.isBusy
        if !session.isClosed {
            status.state = busy ? .busy : (configuration.continuous ? .idle : .stopped)
        }
        publish()
    }

    private func checkSyncDone() {
        guard !syncWaiters.isEmpty, let session, !session.isClosed, !session.isBusy else { return }
        if anotherPassWanted && !configuration.continuous { return startAnotherPass(session) }
        let waiters = syncWaiters
        syncWaiters = []
        for waiter in waiters { waiter.done(.success(())) }
    }

    private func failWaiters(_ error: ReplicationError) {
        let waiters = syncWaiters
        syncWaiters = []
        anotherPassWanted = false
        for waiter in waiters { waiter.done(.failure(error)) }
    }

    private func setState(_ state: ReplicatorState) {
        status.state = state
        publish()
    }

    private func publish() {
        onStatus(status)
    }
}
