import CanopyCore
import CanopyCrypto
import CanopyReplication
import CanopyStore
import CanopyWire
import Dispatch
import Logging

/// The `ReplicationController` backed by CanopyReplication's engine: one `PeerReplicator` per
/// configured peer, dialling through `PeerConnectionManager` and accepting its inbound
/// connections.
///
/// Invariants: everything runs on `queue`, the engine's serial context, which is also the
/// delivery queue of every transport; `peers` holds exactly the configured peers; `connections`
/// records the connection each replicator's current session runs on, for the simultaneous-connect
/// rule.
final class EngineReplication: ReplicationController, @unchecked Sendable {
    let queue: DispatchQueue
    private let scheduler: DispatchReplicationScheduler
    private let random = SystemRandomSource()
    private let store: DocumentStore
    private let manager: PeerConnectionManager
    private let logger: Logger
    private weak var sink: (any ReplicationEventSink)?

    private struct Peer {
        var config: PeerConfig
        /// What the peer may do to this node's `default` database; it sets the direction and scope.
        var share: ShareConfig
        var replicator: PeerReplicator
        var connection: SimultaneousConnect.Connection?
        var progressWatchers: [Int: @Sendable (ReplicationProgress) -> Void] = [:]
        /// Whether the last status said connected (to emit `peer.connected`/`peer.disconnected`
        /// on changes only).
        var connected = false
        /// Documents from this peer refused since the agent started, and the last refusal.
        var rejected: Int64 = 0
        var lastRejection: String?
        /// Documents this node pushed that the peer refused since the agent started, and the last.
        var refusedByPeer: Int64 = 0
        var lastRefusedByPeer: String?
    }

    private var peers: [String: Peer] = [:]
    private var nextWatcher = 0
    /// Told of every status change of one peer's replicator (`observeStatus`), by observation.
    private var statusObservers: [ObjectIdentifier: (peer: String, observer: @Sendable (PeerStatus) -> Void)] = [:]
    private var limits = ReplicationLimits()
    /// Document events not yet handed to the sink: they go in one batch per turn of `queue`, and
    /// always before any status change or sync completion, so observers see them in order.
    /// Kept as the engine reported them: the agent renders an event only if a client reads it.
    /// One entry per batch reported, with the peer it concerns.
    private var pendingDocumentEvents: [(peer: String, events: [DocumentEvent])] = []
    /// True once shutdown has begun (a second request is ignored).
    private var shuttingDown = false
    /// Refusals are logged at most once per peer per interval (a peer sending thousands of bad
    /// documents writes a line per interval, with the count of those held back).
    private var refusalLog = LogRateLimiter(intervalSeconds: AgentLimits.repeatedWarningIntervalSeconds)

    init(queue: DispatchQueue, store: DocumentStore, manager: PeerConnectionManager, logger: Logger, sink: any ReplicationEventSink) {
        self.queue = queue
        self.scheduler = DispatchReplicationScheduler(queue: queue)
        self.store = store
        self.manager = manager
        self.logger = logger
        self.sink = sink
    }

    func apply(config: AgentConfig) {
        queue.async { [self] in
            // New limits take effect by restarting every replicator (they resume from checkpoints).
            let limitsChanged = config.limits != limits
            limits = config.limits
            // A peer that may neither read nor write `default` has no replicator for it (its
            // connections are closed at once).
            let wanted = Dictionary(
                config.peers.compactMap { peer in config.share(of: .default, with: peer.nodeID).map { (peer.nodeID, (peer, $0)) } },
                uniquingKeysWith: { first, _ in first })
            for id in peers.keys.sorted() where limitsChanged || wanted[id]?.0 != peers[id]?.config || wanted[id]?.1 != peers[id]?.share {
                peers[id]?.replicator.stop()
                peers[id] = nil
            }
            forgetHorizons(except: Set(config.peers.map(\.nodeID)))
            for peer in config.peers where peers[peer.nodeID] == nil {
                guard let share = wanted[peer.nodeID]?.1, let replicator = makeReplicator(peer, share) else { continue }
                peers[peer.nodeID] = Peer(config: peer, share: share, replicator: replicator)
                replicator.start()
            }
        }
    }

    /// Peers no longer configured (removed while running or while the agent was down) stop
    /// holding history back from stemming: their horizons are forgotten.
    private func forgetHorizons(except configured: Set<String>) {
        dispatchPrecondition(condition: .onQueue(queue))
        let keep = Set(configured.map(PeerReplicator.peerHorizonKey))
        for horizon in store.peerHorizons where horizon.peer.hasPrefix(PeerReplicator.peerHorizonKey("")) && !keep.contains(horizon.peer) {
            do { try store.forgetPeerHorizon(peer: horizon.peer) } catch {
                logger.warning("could not forget a removed peer's horizon", metadata: ["peer": "\(horizon.peer)", "error": "\(error)"])
            }
        }
    }

    /// A replicator for `default` with `peer`, in the direction its share gives (`read`: this
    /// node pushes, `write`: it pulls) and, with a prefix, limited to those ids both ways: it
    /// serves the peer only them (deletions included) and refuses any other the peer offers.
    private func makeReplicator(_ peer: PeerConfig, _ share: ShareConfig) -> PeerReplicator? {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let nodeID = AgentIdentity.nodeID(peer.nodeID) else { return nil }
        let id = peer.nodeID
        let dialer = peer.address.map { address in
            TCPPeerDialer(manager: manager, address: address, nodeID: nodeID) { [weak self] transport in
                self?.adoptOutbound(id, transport) ?? true
            }
        }
        guard let direction = share.access.direction else { return nil }
        let scope = share.prefix.map(ReplicationFilter.idPrefix) ?? .all
        let configuration = ReplicationConfiguration(
            direction: direction, continuous: peer.mode == .continuous, pullFilter: scope, pushFilter: scope,
            batchSize: min(limits.batchRevisions, WireLimits.changesEntriesMax),
            window: min(limits.batchesInFlight, WireLimits.inFlightBatchesMax),
            heartbeatIntervalSeconds: Double(limits.heartbeatSeconds))
        return PeerReplicator(
            peerName: id, store: store, dialer: dialer, scheduler: scheduler, random: random, configuration: configuration,
            backoff: Backoff(
                initialSeconds: AgentLimits.dialBackoffInitialSeconds, maximumSeconds: AgentLimits.dialBackoffMaximumSeconds,
                jitter: AgentLimits.dialBackoffJitter),
            logger: logger, worker: DispatchReplicationWorker(queue: queue),
            onStatus: { [weak self] status in self?.statusChanged(id, status) },
            onDocumentEvents: { [weak self] events in self?.documentEvents(id, events) })
    }

    /// Applies the simultaneous-connect rule to an outbound connection that just completed, on
    /// `queue`, before the replicator sees it. Returns true to hand it to the replicator's dial
    /// completion (which takes it, or closes it when a session is already open); false when it
    /// was instead swapped in for an inbound session it beats (the peer, applying the same rule,
    /// keeps this one too), so the dial must report no new transport.
    private func adoptOutbound(_ id: String, _ transport: ChannelTransport) -> Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let peer = peers[id] else { return true }
        guard peer.replicator.status.connected, let current = peer.connection else {
            peers[id]?.connection = transport.identity
            return true
        }
        if SimultaneousConnect.keep(current, transport.identity) == .first { return true }
        logger.debug("outbound connection to \(id) wins over the inbound one; switching")
        peers[id]?.connection = transport.identity
        peer.replicator.accept(transport)
        return false
    }

    private func statusChanged(_ id: String, _ status: PeerStatus) {
        dispatchPrecondition(condition: .onQueue(queue))
        flushDocumentEvents()
        if let peer = peers[id], peer.connected != status.connected {
            peers[id]?.connected = status.connected
            if status.connected {
                sink?.emit(type: "peer.connected", data: ["node_id": .string(id)])
            } else {
                sink?.emit(type: "peer.disconnected", data: [
                    "node_id": .string(id), "reason": status.lastError.map(JSONValue.string) ?? .string("closed"),
                ])
            }
        }
        for (peer, observer) in statusObservers.values where peer == id { observer(status) }
        guard let watchers = peers[id]?.progressWatchers, !watchers.isEmpty else { return }
        let progress = Self.combined(status)
        for key in watchers.keys.sorted() { watchers[key]?(progress) }
    }

    /// Queues a batch's document events, in order, for the next flush (the batch stays one array
    /// down to the event ring). Refusals are counted for the peer and logged; `pushed` events are
    /// not passed on: a peer acknowledges a batch, not each document (it may have refused some,
    /// which it reports itself), so this node cannot say per document that the peer took it.
    private func documentEvents(_ id: String, _ batch: [DocumentEvent]) {
        dispatchPrecondition(condition: .onQueue(queue))
        var events = batch
        var refused = 0
        var refusedThere = 0
        var pushed = false
        for event in batch {
            switch event.kind {
            case .rejected:
                refused += 1
                peers[id]?.lastRejection = "\(event.documentID.prefix(200)): \(event.detail ?? "refused")"
            case .refusedByPeer:
                refusedThere += 1
                peers[id]?.lastRefusedByPeer = "\(event.documentID.prefix(200)): \(event.detail ?? "refused")"
            case .pushed:
                pushed = true
            case .pulled, .conflictDetected, .conflictResolved, .conflictAwaitingResolver, .resolutionFailed:
                break
            }
        }
        if refused > 0 { noteRefusals(id, count: refused) }
        if refusedThere > 0 { noteRefusedByPeer(id, count: refusedThere) }
        if pushed { events.removeAll { $0.kind == .pushed } }
        guard !events.isEmpty else { return }
        if pendingDocumentEvents.isEmpty { queue.async { [weak self] in self?.flushDocumentEvents() } }
        pendingDocumentEvents.append((id, events))
    }

    /// Counts documents from the peer this node refused, and logs them (rate-limited).
    private func noteRefusals(_ id: String, count: Int) {
        peers[id]?.rejected += Int64(count)
        logRefusals(id, kind: "rejected", message: "refused documents from a peer", count: count,
                    total: peers[id]?.rejected, last: peers[id]?.lastRejection)
    }

    /// Counts documents this node pushed that the peer refused, and logs them (rate-limited).
    private func noteRefusedByPeer(_ id: String, count: Int) {
        peers[id]?.refusedByPeer += Int64(count)
        logRefusals(id, kind: "refused-by", message: "a peer refused documents this node pushed", count: count,
                    total: peers[id]?.refusedByPeer, last: peers[id]?.lastRefusedByPeer)
    }

    /// One warning per peer and kind per interval, with the count of lines held back since.
    private func logRefusals(_ id: String, kind: String, message: Logger.Message, count: Int, total: Int64?, last: String?) {
        guard case .log(let suppressed) = refusalLog.admit("\(kind):\(id)", now: scheduler.now) else { return }
        logger.warning(message, metadata: [
            "peer": "\(id)", "refused": "\(count)", "refused_since_start": "\(total ?? 0)", "last": "\(last ?? "")",
            "similar_lines_suppressed": "\(suppressed)",
        ])
    }

    private func flushDocumentEvents() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !pendingDocumentEvents.isEmpty else { return }
        let batches = pendingDocumentEvents
        pendingDocumentEvents = []
        for (peer, events) in batches { sink?.emit(documentEvents: events, peer: peer) }
    }

    /// Pull and push progress as one figure (a sync waits for both).
    private static func combined(_ status: PeerStatus) -> ReplicationProgress {
        ReplicationProgress(
            completed: status.pull.completed + status.push.completed, total: status.pull.total + status.push.total)
    }

    func statuses(_ completion: @escaping @Sendable ([PeerReplicationStatus]) -> Void) {
        queue.async { [self] in
            completion(peers.keys.sorted().map { id in
                let peer = peers[id]!
                let status = peer.replicator.status
                let pending = (try? peer.replicator.pendingDocumentIDs(limit: AgentLimits.pendingCountMax).count).map(Int64.init)
                var row = PeerReplicationStatus(
                    nodeID: id, connected: status.connected, state: status.state,
                    lastPushedSequence: status.lastPushedSequence.map { Int64(clamping: $0) },
                    lastPulledSequence: status.lastPulledSequence.map { Int64(clamping: $0) },
                    pendingCount: pending, progress: Self.combined(status), lastError: status.lastError)
                row.rejected = peer.rejected
                row.lastRejection = peer.lastRejection
                row.refusedByPeer = peer.refusedByPeer
                row.lastRefusedByPeer = peer.lastRefusedByPeer
                return row
            })
        }
    }

    func sync(
        peer nodeID: String, progress: @escaping @Sendable (ReplicationProgress) -> Void,
        completion: @escaping @Sendable (Result<SyncOutcome, ReplicationFailure>) -> Void
    ) {
        queue.async { [self] in
            guard let peer = peers[nodeID] else {
                return completion(.failure(ReplicationFailure(code: "unknown_peer", message: "\(nodeID) is not a configured peer")))
            }
            // What this sync did: entries handled since it started (a new session starts its
            // progress from zero, a continuous one goes on from where it was) and refusals.
            let counted = SyncCounter(
                start: Self.combined(peer.replicator.status), rejectedBefore: peer.rejected, refusedByPeerBefore: peer.refusedByPeer)
            let watcher = nextWatcher
            nextWatcher += 1
            peers[nodeID]?.progressWatchers[watcher] = { current in
                counted.observe(current)
                progress(current)
            }
            peer.replicator.sync { [weak self] result in
                guard let self else { return }
                self.flushDocumentEvents()
                self.peers[nodeID]?.progressWatchers[watcher] = nil
                let now = self.peers[nodeID]
                if let now { counted.observe(Self.combined(now.replicator.status)) }
                switch result {
                case .success:
                    let rejected = (now?.rejected ?? counted.rejectedBefore) - counted.rejectedBefore
                    let refusedByPeer = (now?.refusedByPeer ?? counted.refusedByPeerBefore) - counted.refusedByPeerBefore
                    var outcome = SyncOutcome(
                        completed: counted.completed, rejected: rejected, lastRejection: rejected > 0 ? now?.lastRejection : nil)
                    outcome.refusedByPeer = refusedByPeer
                    outcome.lastRefusedByPeer = refusedByPeer > 0 ? now?.lastRefusedByPeer : nil
                    completion(.success(outcome))
                case .failure(let error): completion(.failure(ReplicationFailure(code: "failed", message: "\(error)")))
                }
            }
        }
    }

    /// Tells `observer` of every status change of the replicator for `peer`, on this queue, from
    /// its current status (when the peer is configured) until the observation is cancelled. A
    /// replicator replaced by a config change goes on being observed under the same peer.
    func observeStatus(of peer: String, _ observer: @escaping @Sendable (PeerStatus) -> Void) -> ReplicationStatusObservation {
        let observation = ReplicationStatusObservation { [weak self] key in
            guard let self else { return }
            self.queue.async { self.statusObservers[key] = nil }
        }
        let key = ObjectIdentifier(observation)
        queue.async { [self] in
            statusObservers[key] = (peer, observer)
            if let current = peers[peer]?.replicator.status { observer(current) }
        }
        return observation
    }

    func accept(inbound transport: any MessageTransport, from nodeID: String, connection: SimultaneousConnect.Connection) {
        queue.async { [self] in
            guard let peer = peers[nodeID] else { return transport.close(.localClosed) }
            if peer.replicator.status.connected, let current = peer.connection,
                SimultaneousConnect.keep(current, connection) == .first
            {
                logger.debug("keeping the existing connection to \(nodeID); closing the new one")
                return transport.close(.localClosed)
            }
            peers[nodeID]?.connection = connection
            peer.replicator.accept(transport)
        }
    }

    /// SIGTERM: every replicator drains its session — no new batches in either direction, the
    /// batches in flight finish and are checkpointed, bounded by `AgentLimits.shutdownDrainSeconds`
    /// — and closes with `close` and the FINAL tag; then the close frames get a moment to leave
    /// before the process exits. An interrupted batch is redone next time, never lost.
    func shutdown(_ completion: @escaping @Sendable () -> Void) {
        queue.async { [self] in
            guard !shuttingDown else { return }
            shuttingDown = true
            let group = DispatchGroup()
            for id in peers.keys.sorted() {
                group.enter()
                peers[id]?.replicator.stopGracefully(timeoutSeconds: AgentLimits.shutdownDrainSeconds) { group.leave() }
            }
            group.notify(queue: queue) { [self] in
                peers = [:]
                queue.asyncAfter(deadline: .now() + AgentLimits.closeFlushSeconds) { completion() }
            }
        }
    }
}

/// Counts the changes entries a sync handles from the progress values it observes: increases
/// add up; a value below the last one is a new session, whose progress started from zero.
/// Used on the engine's queue only.
private final class SyncCounter: @unchecked Sendable {
    let rejectedBefore: Int64
    let refusedByPeerBefore: Int64
    private var last: UInt64
    private(set) var completed: UInt64 = 0

    init(start: ReplicationProgress, rejectedBefore: Int64, refusedByPeerBefore: Int64) {
        last = start.completed
        self.rejectedBefore = rejectedBefore
        self.refusedByPeerBefore = refusedByPeerBefore
    }

    func observe(_ progress: ReplicationProgress) {
        completed += progress.completed >= last ? progress.completed - last : progress.completed
        last = progress.completed
    }
}

/// An observation of one peer's replication status (`Agent.observeReplicationStatus`): the
/// observer is told of changes until `cancel` (or until this object is released).
package final class ReplicationStatusObservation: Sendable {
    private let onCancel: @Sendable (ObjectIdentifier) -> Void

    init(onCancel: @escaping @Sendable (ObjectIdentifier) -> Void) {
        self.onCancel = onCancel
    }

    /// Stops the observer being told; idempotent.
    package func cancel() { onCancel(ObjectIdentifier(self)) }

    deinit { onCancel(ObjectIdentifier(self)) }
}
