import CanopyAdmin
import CanopyCore
import CanopyCrypto
import CanopyReplication
import CanopyStore
import CanopyWire
import Dispatch
import Logging

/// The `ReplicationController` backed by CanopyReplication's engine: one `PeerLink` per
/// configured peer — one connection, dialled through `PeerConnectionManager` or accepted from it —
/// and on it a `PeerReplicator` per database the two share, each over a channel of the
/// connection (`Protocol/replication-v2.md`).
///
/// What a peer may do to a database is its share (`AgentConfig.share(of:with:)`): the direction
/// this node replicates in (`read`: push, `write`: pull) and, with a prefix, the ids both ways.
///
/// Invariants: everything runs on `queue`, the engine's serial context, which is also the
/// delivery queue of every transport; `peers` holds exactly the configured peers, each with a
/// replicator for exactly the databases shared with it that are open; `adoption` records the
/// connection a peer's link runs on, for the simultaneous-connect rule.
final class EngineReplication: ReplicationController, @unchecked Sendable {
    let queue: DispatchQueue
    private let scheduler: DispatchReplicationScheduler
    private let random = SystemRandomSource()
    private let databases: DatabaseRegistry
    private let connectionID: [UInt8]
    private let manager: PeerConnectionManager
    private let logger: Logger
    private weak var sink: (any ReplicationEventSink)?
    /// Told of each database a peer asked for and was refused (it is not shared with the peer).
    private let onOffer: @Sendable (String, DatabaseName) -> Void

    /// One database replicated with a peer.
    private struct Shared {
        var share: Share
        var replicator: PeerReplicator
        var progressWatchers: [Int: @Sendable (ReplicationProgress) -> Void] = [:]
        /// Documents from this peer refused since the agent started, and the last refusal.
        var rejected: Int64 = 0
        var lastRejection: String?
        /// Documents this node pushed that the peer refused since the agent started, and the last.
        var refusedByPeer: Int64 = 0
        var lastRefusedByPeer: String?
        /// The documents the peer refused most recently, with its reason (`why`), at most
        /// `AgentLimits.refusedDocumentsKept`; a document pushed again since is taken out.
        var refusedDocuments = RecentRefusals()
        /// Documents written from this peer, and documents of this node the peer stored, since
        /// the agent started (what a sync moved is the difference).
        var received: Int64 = 0
        var sent: Int64 = 0
        /// `PeerStatus.storeFailures` when it was last looked at (a rise is a new failure).
        var storeFailures = 0
        /// `PeerStatus.protocolViolations` when it was last looked at.
        var protocolViolations = 0
    }

    private struct Peer {
        var config: PeerConfig
        var link: PeerLink
        var databases: [DatabaseName: Shared] = [:]
        /// Whether the link said connected (to emit `peer.connected`/`peer.disconnected` on
        /// changes only).
        var connected = false
        /// Connections and database sessions closed because the peer broke the protocol, since
        /// the agent started (or the peer was added), and what the last one found.
        var protocolViolations: Int64 = 0
        var lastProtocolViolation: String?
        /// When the connection last went down (wall-clock seconds); nil while connected or when
        /// it never was since the peer was added.
        var disconnectedAt: Double?
    }

    private var peers: [String: Peer] = [:]
    /// What an application replicating in-process set for a peer beyond its config, by node id.
    private var overrides: [String: ReplicatorOverrides] = [:]
    private var nextWatcher = 0
    /// Told of every status change of one peer's `default` replicator (`observeStatus`).
    private var statusObservers: [ObjectIdentifier: (peer: String, observer: @Sendable (PeerStatus) -> Void)] = [:]
    /// Told of one peer's document events, of one database or all (`observeDocumentEvents`),
    /// batch by batch as `flushDocumentEvents` hands them to the sink.
    private var documentObservers: [ObjectIdentifier: (
        peer: String, database: DatabaseName?, observer: @Sendable (DatabaseName, [DocumentEvent]) -> Void
    )] = [:]
    private var limits = ReplicationLimits()
    /// Document events not yet handed to the sink: they go in one batch per turn of `queue`, and
    /// always before any status change or sync completion, so observers see them in order.
    /// Kept as the engine reported them: the agent renders an event only if a client reads it.
    private var pendingDocumentEvents: [(peer: String, database: DatabaseName, events: [DocumentEvent])] = []
    /// True once shutdown has begun (a second request is ignored).
    private var shuttingDown = false
    /// Refusals are logged at most once per peer per interval (a peer sending thousands of bad
    /// documents writes a line per interval, with the count of those held back).
    /// The connection each peer's link runs on, for the simultaneous-connect rule.
    private var adoption = SimultaneousConnect.Adoption()
    private var refusalLog = LogRateLimiter(intervalSeconds: AgentLimits.repeatedWarningIntervalSeconds)

    init(
        queue: DispatchQueue, databases: DatabaseRegistry, connectionID: [UInt8], manager: PeerConnectionManager, logger: Logger,
        sink: any ReplicationEventSink, onOffer: @escaping @Sendable (String, DatabaseName) -> Void
    ) {
        self.queue = queue
        self.scheduler = DispatchReplicationScheduler(queue: queue)
        self.databases = databases
        self.connectionID = connectionID
        self.manager = manager
        self.logger = logger
        self.sink = sink
        self.onOffer = onOffer
    }

    func apply(config: AgentConfig) {
        queue.async { [self] in
            // New limits take effect by restarting every replicator (they resume from checkpoints).
            let limitsChanged = config.limits != limits
            limits = config.limits
            let wanted = Dictionary(config.peers.map { ($0.nodeID, $0) }, uniquingKeysWith: { first, _ in first })
            for id in peers.keys.sorted() where limitsChanged || wanted[id] != peers[id]?.config {
                stop(id)
            }
            forgetHorizons(config)
            let sharing = config.sharing
            let databases = config.allDatabases.map(\.name)
            for peer in config.peers {
                if peers[peer.nodeID] == nil {
                    guard let link = makeLink(peer) else { continue }
                    peers[peer.nodeID] = Peer(config: peer, link: link)
                }
                applyShares(sharing.shares(with: peer.nodeID, among: databases), to: peer)
            }
        }
    }

    /// Sets (or, nil, drops) `overrides` for the peer `id`. Setting restarts the replicators the
    /// peer has with them (each resumes from its checkpoint); dropping leaves running replicators
    /// as they are: the next one made for the peer has none. `done` runs on `queue` after.
    func setOverrides(_ overrides: ReplicatorOverrides?, for id: String, done: @escaping @Sendable () -> Void) {
        queue.async { [self] in
            defer { done() }
            guard let overrides else { self.overrides[id] = nil; return }
            self.overrides[id] = overrides
            guard let peer = peers[id] else { return }
            let shares = peer.databases.values.map(\.share)
            for (name, shared) in peer.databases {
                shared.replicator.stop()
                peer.link.remove(name)
                peers[id]?.databases[name] = nil
            }
            applyShares(shares, to: peer.config)
        }
    }

    /// Starts, restarts and stops the peer's replicators so that they match `shares`.
    private func applyShares(_ shares: [Share], to peer: PeerConfig) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let link = peers[peer.nodeID]?.link else { return }
        let wanted = Dictionary(shares.map { ($0.database, $0) }, uniquingKeysWith: { first, _ in first })
        for (name, shared) in peers[peer.nodeID]?.databases ?? [:] where wanted[name] != shared.share {
            shared.replicator.stop()
            link.remove(name)
            peers[peer.nodeID]?.databases[name] = nil
        }
        for share in shares where peers[peer.nodeID]?.databases[share.database] == nil {
            guard let replicator = makeReplicator(peer, share, link) else { continue }
            link.add(replicator, for: share.database)
            peers[peer.nodeID]?.databases[share.database] = Shared(share: share, replicator: replicator)
            replicator.start()
        }
    }

    /// Stops everything replicated with a peer and forgets it.
    private func stop(_ id: String) {
        guard let peer = peers.removeValue(forKey: id) else { return }
        adoption.forget(id)
        for shared in peer.databases.values { shared.replicator.stop() }
        peer.link.stop()
    }

    /// Peers that no longer share a database (removed, or unshared while running or while the
    /// agent was down) stop holding its history back from stemming: their horizons are forgotten.
    private func forgetHorizons(_ config: AgentConfig) {
        dispatchPrecondition(condition: .onQueue(queue))
        let sharing = config.sharing
        for (name, store) in databases.sorted {
            let keep = Set(config.peers.filter { sharing.share(of: name, with: $0.nodeID) != nil }.map { PeerReplicator.peerHorizonKey($0.nodeID) })
            for horizon in store.peerHorizons where horizon.peer.hasPrefix(PeerReplicator.peerHorizonKey("")) && !keep.contains(horizon.peer) {
                do { try store.forgetPeerHorizon(peer: horizon.peer) } catch {
                    logger.warning("could not forget a peer's horizon", metadata: ["peer": "\(horizon.peer)", "db": "\(name)", "error": "\(error)"])
                }
            }
            forgetCheckpointCopies(in: store, named: name, keeping: keep)
        }
    }

    /// The copies of checkpoints kept for peers that no longer share `store`'s database (removed,
    /// or unshared) are removed with them: a removed peer's records no longer take room.
    private func forgetCheckpointCopies(in store: DocumentStore, named name: DatabaseName, keeping keep: Set<String>) {
        do {
            let ids = try store.localIDs(withPrefix: ReplicationIdentity.peerCheckpointPrefix)
            let held = Set(ids.compactMap { ReplicationIdentity.peer(ofCheckpointDocument: $0) })
            for peer in held.sorted() where !keep.contains(peer) {
                let removed = try store.localDeleteAll(withPrefix: ReplicationIdentity.peerCheckpointPrefix(peer: peer))
                logger.debug("forgot the checkpoint copies kept for a peer no longer sharing the database", metadata: [
                    "peer": "\(peer)", "db": "\(name)", "removed": "\(removed)",
                ])
            }
        } catch {
            logger.warning("could not forget the checkpoint copies kept for peers", metadata: ["db": "\(name)", "error": "\(error)"])
        }
    }

    /// The link to `peer`: dialled at its address when it has one; the peer's requests for a
    /// database it does not share are refused and reported (`onOffer`).
    private func makeLink(_ peer: PeerConfig) -> PeerLink? {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let nodeID = AgentIdentity.nodeID(peer.nodeID) else { return nil }
        let id = peer.nodeID
        let dialer = peer.address.map { address in
            TCPPeerDialer(manager: manager, address: address, nodeID: nodeID) { [weak self] transport in
                self?.adoptOutbound(id, transport) ?? true
            }
        }
        let onOffer = self.onOffer
        return PeerLink(
            peerName: id, connectionID: connectionID, dialer: dialer, scheduler: scheduler,
            heartbeatIntervalSeconds: Double(limits.heartbeatSeconds), logger: logger,
            refusal: { database in
                onOffer(id, database)
                return Sharing.refusal(of: database)
            },
            onConnection: { [weak self] connected, reason in self?.connectionChanged(id, connected, reason) })
    }

    /// A replicator for `share.database` with `peer`, in the direction the share gives (`read`:
    /// this node pushes, `write`: it pulls) and, with a prefix, limited to those ids both ways: it
    /// serves the peer only them (deletions included) and refuses any other the peer offers.
    private func makeReplicator(_ peer: PeerConfig, _ share: Share, _ link: PeerLink) -> PeerReplicator? {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let store = databases[share.database] else { return nil }
        let id = peer.nodeID
        let database = share.database
        let overrides = overrides[id] ?? ReplicatorOverrides()
        guard let scope = overrides.scope(within: share.prefix) else {
            logger.notice("no document of \(database) is both shared with \(id) and named by the replicator's document ids: not replicating it")
            return nil
        }
        var base = ReplicationConfiguration(
            continuous: peer.mode == .continuous, batchSize: min(limits.batchRevisions, WireLimits.changesEntriesMax),
            window: min(limits.batchesInFlight, WireLimits.inFlightBatchesMax),
            heartbeatIntervalSeconds: Double(limits.heartbeatSeconds), conflictPolicy: overrides.conflictPolicy)
        base.peerCheckpointsMax = AgentLimits.peerCheckpointsMax
        guard let bounded = Sharing.replication(of: share, scope: scope, base) else { return nil }
        return PeerReplicator(
            peerName: id, store: store, dialer: link.channelDialer(for: database), scheduler: scheduler, random: random,
            configuration: bounded,
            backoff: Backoff(
                initialSeconds: AgentLimits.dialBackoffInitialSeconds, maximumSeconds: AgentLimits.dialBackoffMaximumSeconds,
                jitter: AgentLimits.dialBackoffJitter),
            storeFailureBackoff: Backoff(
                initialSeconds: AgentLimits.storeFailureBackoffInitialSeconds,
                maximumSeconds: AgentLimits.storeFailureBackoffMaximumSeconds, jitter: AgentLimits.dialBackoffJitter),
            logger: logger, worker: DispatchReplicationWorker(queue: queue),
            onStatus: { [weak self] status in self?.statusChanged(id, database, status) },
            onDocumentEvents: { [weak self] events in self?.documentEvents(id, database, events) })
    }

    /// Applies the simultaneous-connect rule to an outbound connection that just completed, on
    /// `queue`, before the link takes it. Returns true to hand it to the link (which replaces any
    /// connection it holds with it); false when the connection open wins and this one is closed.
    private func adoptOutbound(_ id: String, _ transport: ChannelTransport) -> Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let peer = peers[id] else { return true }
        guard adoption.admit(transport.identity, from: id, sessionOpen: peer.link.isConnected) else {
            logger.debug("keeping the existing connection to \(id); closing the new outbound one")
            transport.close(.localClosed)
            return false
        }
        return true
    }

    func accept(inbound transport: any ConnectionTransport, role: MultiplexStateMachine.Role, from nodeID: String,
                connection: SimultaneousConnect.Connection) {
        queue.async { [self] in
            guard let peer = peers[nodeID] else { return transport.close(.localClosed) }
            guard adoption.admit(connection, from: nodeID, sessionOpen: peer.link.isConnected) else {
                logger.debug("keeping the existing connection to \(nodeID); closing the new one")
                return transport.close(.localClosed)
            }
            peer.link.adopt(transport, role: role)
        }
    }

    private func connectionChanged(_ id: String, _ connected: Bool, _ reason: TransportCloseReason?) {
        dispatchPrecondition(condition: .onQueue(queue))
        flushDocumentEvents()
        // Counted before the check below: a connection that breaks the rules before its hello
        // was never reported connected.
        if case .protocolViolation(let detail)? = reason { protocolViolation(id, "connection: \(detail)", count: 1) }
        guard let peer = peers[id], peer.connected != connected else { return }
        peers[id]?.connected = connected
        peers[id]?.disconnectedAt = connected ? nil : Agent.wallClock()
        if connected {
            sink?.emit(batch: [.event(Admin.PeerConnected(nodeID: id))])
        } else {
            let text: String
            switch reason {
            case .failed(let detail)?, .protocolViolation(let detail)?: text = detail
            case .peerClosed?: text = "the peer closed the connection"
            case .localClosed?, nil: text = "closed"
            }
            sink?.emit(batch: [.event(Admin.PeerDisconnected(nodeID: id, reason: text))])
        }
    }

    private func statusChanged(_ id: String, _ database: DatabaseName, _ status: PeerStatus) {
        dispatchPrecondition(condition: .onQueue(queue))
        flushDocumentEvents()
        noteStoreFailures(id, database, status)
        noteProtocolViolations(id, database, status)
        if database == .default {
            for (peer, observer) in statusObservers.values where peer == id { observer(status) }
        }
        guard let watchers = peers[id]?.databases[database]?.progressWatchers, !watchers.isEmpty else { return }
        let progress = Self.combined(status)
        for key in watchers.keys.sorted() { watchers[key]?(progress) }
    }

    /// Queues a batch's document events, in order, for the next flush (the batch stays one array
    /// down to the event ring). Refusals are counted for the peer and database and logged;
    /// `pushed` events are not passed on: a peer acknowledges a batch, not each document (it may
    /// have refused some, which it reports itself), so this node cannot say per document that
    /// the peer took it.
    ///
    /// A batch that reports after its replicator was stopped (the peer removed, or restarted
    /// with new overrides, while the batch was being written) is still passed on: it describes
    /// writes that happened. Only the counters, which belong to the running replicator, skip it.
    private func documentEvents(_ id: String, _ database: DatabaseName, _ batch: [DocumentEvent]) {
        dispatchPrecondition(condition: .onQueue(queue))
        var events = batch
        var refused = 0
        var refusedThere = 0
        var pushed = 0
        var pulled = 0
        // Read once per batch: a document pushed again is no longer refused.
        let remembersRefusals = peers[id]?.databases[database]?.refusedDocuments.isEmpty == false
        for event in batch {
            switch event.kind {
            case .rejected:
                refused += 1
                peers[id]?.databases[database]?.lastRejection = "\(event.documentID.prefix(200)): \(event.detail ?? "refused")"
            case .refusedByPeer:
                refusedThere += 1
                peers[id]?.databases[database]?.lastRefusedByPeer = "\(event.documentID.prefix(200)): \(event.detail ?? "refused")"
                peers[id]?.databases[database]?.refusedDocuments.record(event.documentID, revision: event.revision, reason: event.detail ?? "refused")
            case .pushed:
                pushed += 1
                if remembersRefusals { peers[id]?.databases[database]?.refusedDocuments.forget(event.documentID) }
            case .pulled:
                pulled += 1
            case .conflictDetected, .conflictResolved, .conflictAwaitingResolver, .resolutionFailed:
                break
            }
        }
        if refused > 0 {
            peers[id]?.databases[database]?.rejected += Int64(refused)
            let shared = peers[id]?.databases[database]
            logRefusals(id, database, kind: "rejected", message: "refused documents from a peer", count: refused,
                        total: shared?.rejected, last: shared?.lastRejection)
        }
        if refusedThere > 0 {
            peers[id]?.databases[database]?.refusedByPeer += Int64(refusedThere)
            let shared = peers[id]?.databases[database]
            logRefusals(id, database, kind: "refused-by", message: "a peer refused documents this node pushed", count: refusedThere,
                        total: shared?.refusedByPeer, last: shared?.lastRefusedByPeer)
        }
        peers[id]?.databases[database]?.received += Int64(pulled)
        peers[id]?.databases[database]?.sent += Int64(pushed)
        if pushed > 0 { events.removeAll { $0.kind == .pushed } }
        guard !events.isEmpty else { return }
        if pendingDocumentEvents.isEmpty { queue.async { [weak self] in self?.flushDocumentEvents() } }
        pendingDocumentEvents.append((id, database, events))
    }

    /// A session ended by a store failing (this node's disk full, or the peer's) is logged as one
    /// warning per peer and database per interval, with how many failed in a row
    /// (`PeerStatus.storeFailures`), not a line per retry; replication working again is logged once.
    private func noteStoreFailures(_ id: String, _ database: DatabaseName, _ status: PeerStatus) {
        guard let seen = peers[id]?.databases[database]?.storeFailures, seen != status.storeFailures else { return }
        peers[id]?.databases[database]?.storeFailures = status.storeFailures
        if status.storeFailures == 0 {
            logger.notice("replication with a peer stores batches again after store failures", metadata: [
                "peer": "\(id)", "db": "\(database)", "failures_in_a_row": "\(seen)",
            ])
            return
        }
        guard status.storeFailures > seen,
            case .log(let suppressed) = refusalLog.admit("store-failed:\(id):\(database)", now: scheduler.now)
        else { return }
        logger.warning("replication with a peer stopped: a store failed (see error); retrying with backoff", metadata: [
            "peer": "\(id)", "db": "\(database)", "failures_in_a_row": "\(status.storeFailures)",
            "error": "\(status.lastError ?? "")", "similar_lines_suppressed": "\(suppressed)",
        ])
    }

    /// Sessions the peer's replicator closed for a protocol violation since it was last looked at.
    private func noteProtocolViolations(_ id: String, _ database: DatabaseName, _ status: PeerStatus) {
        guard let seen = peers[id]?.databases[database]?.protocolViolations, status.protocolViolations > seen else { return }
        peers[id]?.databases[database]?.protocolViolations = status.protocolViolations
        protocolViolation(id, "database \(database): \(status.lastProtocolViolation ?? "")", count: status.protocolViolations - seen)
    }

    /// Counts `count` violations of the protocol by peer `id`, the last described by `detail`
    /// (where it was found: the connection or a database, and what), and logs them: one warning
    /// per peer per interval, with the total and the lines held back.
    private func protocolViolation(_ id: String, _ detail: String, count: Int) {
        guard peers[id] != nil else { return }
        let described = String(detail.prefix(300))
        peers[id]?.protocolViolations += Int64(count)
        peers[id]?.lastProtocolViolation = described
        guard case .log(let suppressed) = refusalLog.admit("violation:\(id)", now: scheduler.now) else { return }
        logger.warning("a peer broke the replication protocol; what it broke was closed", metadata: [
            "peer": "\(id)", "violation": "\(described)", "protocol_violations": "\(peers[id]?.protocolViolations ?? 0)",
            "similar_lines_suppressed": "\(suppressed)",
        ])
    }

    /// One warning per peer, database and kind per interval, with the count of lines held back since.
    private func logRefusals(
        _ id: String, _ database: DatabaseName, kind: String, message: Logger.Message, count: Int, total: Int64?, last: String?
    ) {
        guard case .log(let suppressed) = refusalLog.admit("\(kind):\(id):\(database)", now: scheduler.now) else { return }
        logger.warning(message, metadata: [
            "peer": "\(id)", "db": "\(database)", "refused": "\(count)", "refused_since_start": "\(total ?? 0)", "last": "\(last ?? "")",
            "similar_lines_suppressed": "\(suppressed)",
        ])
    }

    private func flushDocumentEvents() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !pendingDocumentEvents.isEmpty else { return }
        let batches = pendingDocumentEvents
        pendingDocumentEvents = []
        for (peer, database, events) in batches {
            sink?.emit(documentEvents: events, peer: peer, database: database)
            for (observed, only, observer) in documentObservers.values where observed == peer && (only ?? database) == database {
                observer(database, events)
            }
        }
    }

    /// Pull and push progress as one figure (a sync waits for both).
    private static func combined(_ status: PeerStatus) -> ReplicationProgress {
        ReplicationProgress(
            completed: status.pull.completed + status.push.completed, total: status.pull.total + status.push.total)
    }

    /// Every peer's row: the `default` database's replication (when the peer shares it), and a
    /// row per database. The members the config says (`address`, `direction`, `mode`) are the
    /// agent's to fill in (`Agent.peerRows`).
    func delivery(of documentID: String, in database: DatabaseName, _ completion: @escaping @Sendable ([PeerDelivery]) -> Void) {
        queue.async { [self] in
            completion(peers.keys.sorted().map { id in
                let peer = peers[id]!
                let shared = peer.databases[database]
                return PeerDelivery(
                    nodeID: id, replicating: shared != nil, connected: peer.link.isConnected, disconnectedAt: peer.disconnectedAt,
                    acknowledged: shared?.replicator.acknowledgedPushSequence, intake: shared?.replicator.status.peerIntake,
                    refusal: shared?.refusedDocuments.refusal(of: documentID))
            })
        }
    }

    func compare(
        peer nodeID: String, database: DatabaseName, prefix: String, differencesMax: Int, timeoutSeconds: Double,
        _ completion: @escaping @Sendable (Result<DigestCompareOutcome, DigestCompareFailure>?) -> Void
    ) {
        queue.async { [self] in
            guard let shared = peers[nodeID]?.databases[database] else { return completion(nil) }
            shared.replicator.compareDigests(prefix: prefix, differencesMax: differencesMax, timeoutSeconds: timeoutSeconds) { completion($0) }
        }
    }

    func statuses(_ completion: @escaping @Sendable ([Admin.PeerStatus]) -> Void) {
        queue.async { [self] in
            completion(peers.keys.sorted().map { id in
                let peer = peers[id]!
                var row = Admin.PeerStatus(nodeID: id, address: nil, direction: "none", mode: .continuous, connected: peer.link.isConnected, state: .stopped)
                row.databases = Self.databaseRows(peer)
                row.protocolViolations = peer.protocolViolations
                row.lastProtocolViolation = peer.lastProtocolViolation
                guard let shared = peer.databases[.default] else { return row }
                let status = shared.replicator.status
                row.connected = status.connected
                row.state = status.state
                row.lastPushedSeq = status.lastPushedSequence.map { Int64(clamping: $0) }
                row.lastPulledSeq = status.lastPulledSequence.map { Int64(clamping: $0) }
                row.pending = (try? shared.replicator.pendingDocumentIDs(limit: AgentLimits.pendingCountMax).count).map(Int64.init)
                let progress = Self.combined(status)
                row.progress = Admin.Progress(completed: Int64(progress.completed), total: Int64(progress.total))
                row.lastError = status.lastError
                row.rejected = shared.rejected
                row.lastRejection = shared.lastRejection
                row.refusedByPeer = shared.refusedByPeer
                row.lastRefusedByPeer = shared.lastRefusedByPeer
                return row
            })
        }
    }

    private static func databaseRows(_ peer: Peer) -> [Admin.PeerDatabaseStatus] {
        peer.databases.keys.sorted().map { name in
            let shared = peer.databases[name]!
            let status = shared.replicator.status
            return Admin.PeerDatabaseStatus(
                db: name.text, access: shared.share.access.rawValue, prefix: shared.share.prefix, state: status.state,
                lastPushedSeq: status.lastPushedSequence.map { Int64(clamping: $0) },
                lastPulledSeq: status.lastPulledSequence.map { Int64(clamping: $0) }, rejected: shared.rejected,
                lastRejection: shared.lastRejection, refusedByPeer: shared.refusedByPeer, lastRefusedByPeer: shared.lastRefusedByPeer,
                lastError: status.lastError,
                peerTakes: shared.share.access.direction?.pushes == true ? status.peerIntake?.summary : nil)
        }
    }

    /// A one-shot replication of every database shared with the peer; completes when all have
    /// caught up (or one failed), with what they did together. A database the peer refuses (it
    /// does not share it with this node) does not hold the others up: it is named in the outcome.
    @discardableResult
    func sync(
        peer nodeID: String, progress: @escaping @Sendable (ReplicationProgress) -> Void,
        completion: @escaping @Sendable (Result<SyncOutcome, ReplicationFailure>) -> Void
    ) -> SyncCancellation {
        let group = SyncGroup(completion: completion)
        queue.async { [self] in
            guard let peer = peers[nodeID], !peer.databases.isEmpty else {
                return group.fail(ReplicationFailure(code: "unknown_peer", message: "\(nodeID) shares no database with this node"))
            }
            let names = peer.databases.keys.sorted()
            group.expect(names.count)
            for name in names { sync(nodeID, name, progress: progress, group: group) }
        }
        return SyncCancellation { [weak self] in
            guard let self else { return }
            self.queue.async { self.cancel(group, of: nodeID) }
        }
    }

    /// The caller of a sync went away: its waits and progress watchers go, the replication stays.
    private func cancel(_ group: SyncGroup, of nodeID: String) {
        dispatchPrecondition(condition: .onQueue(queue))
        for (name, waiter, watcher) in group.cancel() {
            guard let shared = peers[nodeID]?.databases[name] else { continue }
            shared.replicator.cancelSync(waiter)
            peers[nodeID]?.databases[name]?.progressWatchers[watcher] = nil
        }
    }

    private func sync(_ nodeID: String, _ name: DatabaseName, progress: @escaping @Sendable (ReplicationProgress) -> Void, group: SyncGroup) {
        guard let shared = peers[nodeID]?.databases[name] else { return group.finished(name, .failure(ReplicationFailure(code: "unknown_peer", message: "\(name) is no longer shared"))) }
        // What this sync did: entries handled since it started (a new session starts its
        // progress from zero, a continuous one goes on from where it was) and refusals.
        let counted = SyncCounter(
            start: Self.combined(shared.replicator.status), rejectedBefore: shared.rejected, refusedByPeerBefore: shared.refusedByPeer,
            receivedBefore: shared.received, sentBefore: shared.sent)
        let watcher = nextWatcher
        nextWatcher += 1
        peers[nodeID]?.databases[name]?.progressWatchers[watcher] = { current in
            counted.observe(current)
            progress(current)
        }
        let pushes = shared.share.access.direction?.pushes ?? false
        let waiter = shared.replicator.sync { [weak self] result in
            guard let self else { return }
            self.flushDocumentEvents()
            self.peers[nodeID]?.databases[name]?.progressWatchers[watcher] = nil
            let now = self.peers[nodeID]?.databases[name]
            if let now { counted.observe(Self.combined(now.replicator.status)) }
            switch result {
            case .success:
                let rejected = (now?.rejected ?? counted.rejectedBefore) - counted.rejectedBefore
                let refusedByPeer = (now?.refusedByPeer ?? counted.refusedByPeerBefore) - counted.refusedByPeerBefore
                var outcome = SyncOutcome(
                    completed: counted.completed, rejected: rejected, lastRejection: rejected > 0 ? now?.lastRejection : nil)
                outcome.refusedByPeer = refusedByPeer
                outcome.lastRefusedByPeer = refusedByPeer > 0 ? now?.lastRefusedByPeer : nil
                outcome.received = (now?.received ?? counted.receivedBefore) - counted.receivedBefore
                outcome.sent = (now?.sent ?? counted.sentBefore) - counted.sentBefore
                if pushes, let intake = now?.replicator.status.peerIntake, intake != .everything { outcome.peerTakesPart[name] = intake }
                group.finished(name, .success(outcome))
            case .failure(.notShared(let detail)):
                var outcome = SyncOutcome(completed: counted.completed)
                outcome.notSharedByPeer[name] = detail
                group.finished(name, .success(outcome))
            case .failure(let error): group.finished(name, .failure(ReplicationFailure(code: "failed", message: "\(name): \(error)")))
            }
        }
        group.waiting(name, waiter: waiter, watcher: watcher)
    }

    /// Tells `observer` of every status change of the `default` replicator for `peer`, on this
    /// queue, from its current status (when the peer shares it) until the observation is
    /// cancelled. A replicator replaced by a config change goes on being observed under the same peer.
    func observeStatus(of peer: String, _ observer: @escaping @Sendable (PeerStatus) -> Void) -> ReplicationStatusObservation {
        let observation = ReplicationStatusObservation { [weak self] key in
            guard let self else { return }
            self.queue.async { self.statusObservers[key] = nil }
        }
        let key = ObjectIdentifier(observation)
        queue.async { [self] in
            statusObservers[key] = (peer, observer)
            if let current = peers[peer]?.databases[.default]?.replicator.status { observer(current) }
        }
        return observation
    }

    /// Tells `observer` of the document events of `peer`, of `database` or (nil) every database
    /// shared with it, on this queue, batch by batch in the order the sink gets them, from the
    /// next flush until the observation is cancelled. What the sink does not get (`pushed`, see
    /// `documentEvents`) the observer does not either.
    func observeDocumentEvents(
        of peer: String, database: DatabaseName?, _ observer: @escaping @Sendable (DatabaseName, [DocumentEvent]) -> Void
    ) -> ReplicationStatusObservation {
        let observation = ReplicationStatusObservation { [weak self] key in
            guard let self else { return }
            self.queue.async { self.documentObservers[key] = nil }
        }
        let key = ObjectIdentifier(observation)
        queue.async { [self] in documentObservers[key] = (peer, database, observer) }
        return observation
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
                for name in peers[id]!.databases.keys.sorted() {
                    group.enter()
                    peers[id]?.databases[name]?.replicator.stopGracefully(timeoutSeconds: AgentLimits.shutdownDrainSeconds) { group.leave() }
                }
            }
            group.notify(queue: queue) { [self] in
                for peer in peers.values { peer.link.stop() }
                peers = [:]
                queue.asyncAfter(deadline: .now() + AgentLimits.closeFlushSeconds) { completion() }
            }
        }
    }
}

/// The syncs of one peer's databases, reported as one outcome when the last has finished: the
/// first failure, or the counts added up. Cancelled, it reports nothing. Used on the engine's
/// queue only (`fail` and `cancel` too), except that `completion` may then run anywhere.
private final class SyncGroup: @unchecked Sendable {
    private var remaining = 0
    private var outcome = SyncOutcome(completed: 0)
    private var failure: ReplicationFailure?
    private var completion: (@Sendable (Result<SyncOutcome, ReplicationFailure>) -> Void)?
    /// The replicators' sync waits and the progress watchers still open, by database.
    private var open: [DatabaseName: (waiter: Int, watcher: Int)] = [:]
    /// Databases already finished (a replicator may finish a sync before `sync` returns).
    private var done: Set<DatabaseName> = []

    init(completion: @escaping @Sendable (Result<SyncOutcome, ReplicationFailure>) -> Void) {
        self.completion = completion
    }

    /// How many databases will finish.
    func expect(_ count: Int) { remaining = count }

    /// The sync of `database` waits as the replicator's `waiter`, watched by `watcher`.
    func waiting(_ database: DatabaseName, waiter: Int, watcher: Int) {
        guard completion != nil, !done.contains(database) else { return }
        open[database] = (waiter, watcher)
    }

    func fail(_ failure: ReplicationFailure) {
        let completion = self.completion
        self.completion = nil
        completion?(.failure(failure))
    }

    /// Ends the group without a report; returns the waits to forget.
    func cancel() -> [(DatabaseName, Int, Int)] {
        completion = nil
        defer { open = [:] }
        return open.sorted { $0.key < $1.key }.map { ($0.key, $0.value.waiter, $0.value.watcher) }
    }

    func finished(_ database: DatabaseName, _ result: Result<SyncOutcome, ReplicationFailure>) {
        open[database] = nil
        done.insert(database)
        switch result {
        case .success(let done):
            outcome.completed += done.completed
            outcome.rejected += done.rejected
            outcome.lastRejection = done.lastRejection ?? outcome.lastRejection
            outcome.refusedByPeer += done.refusedByPeer
            outcome.received += done.received
            outcome.sent += done.sent
            outcome.lastRefusedByPeer = done.lastRefusedByPeer ?? outcome.lastRefusedByPeer
            outcome.notSharedByPeer.merge(done.notSharedByPeer) { first, _ in first }
            outcome.peerTakesPart.merge(done.peerTakesPart) { first, _ in first }
        case .failure(let error):
            failure = failure ?? error
        }
        remaining -= 1
        guard remaining == 0, let completion else { return }
        self.completion = nil
        completion(failure.map { .failure($0) } ?? .success(outcome))
    }
}

/// Counts the changes entries a sync handles from the progress values it observes: increases
/// add up; a value below the last one is a new session, whose progress started from zero.
/// Used on the engine's queue only.
private final class SyncCounter: @unchecked Sendable {
    let rejectedBefore: Int64
    let refusedByPeerBefore: Int64
    let receivedBefore: Int64
    let sentBefore: Int64
    private var last: UInt64
    private(set) var completed: UInt64 = 0

    init(start: ReplicationProgress, rejectedBefore: Int64, refusedByPeerBefore: Int64, receivedBefore: Int64, sentBefore: Int64) {
        last = start.completed
        self.rejectedBefore = rejectedBefore
        self.refusedByPeerBefore = refusedByPeerBefore
        self.receivedBefore = receivedBefore
        self.sentBefore = sentBefore
    }

    func observe(_ progress: ReplicationProgress) {
        completed += progress.completed >= last ? progress.completed - last : progress.completed
        last = progress.completed
    }
}

/// An observation of one peer's replication status (`Agent.observeReplicationStatus`) or document
/// events (`Agent.observeDocumentEvents`): the observer is told of them until `cancel` (or until
/// this object is released).
package final class ReplicationStatusObservation: Sendable {
    private let onCancel: @Sendable (ObjectIdentifier) -> Void

    init(onCancel: @escaping @Sendable (ObjectIdentifier) -> Void) {
        self.onCancel = onCancel
    }

    /// Stops the observer being told; idempotent.
    package func cancel() { onCancel(ObjectIdentifier(self)) }

    deinit { onCancel(ObjectIdentifier(self)) }
}

/// What an application replicating in-process (the `Canopy` library's `Replicator`) sets for a
/// peer beyond what the config file can say: the documents to replicate and a policy of its own
/// for the conflicts the peer's revisions create.
package struct ReplicatorOverrides: Sendable {
    /// Only these documents, both ways (within the share's prefix); nil: every shared document.
    package var documentIDs: [String]?
    /// Settles conflicts from the peer instead of the database's rules; nil: the rules.
    package var conflictPolicy: ConflictPolicy?

    package init(documentIDs: [String]? = nil, conflictPolicy: ConflictPolicy? = nil) {
        self.documentIDs = documentIDs
        self.conflictPolicy = conflictPolicy
    }

    /// The filter of a database shared with `prefix`: the ids of `documentIDs` that the prefix
    /// admits, or the prefix; nil when no document is left.
    func scope(within prefix: String?) -> ReplicationFilter? {
        guard let documentIDs else { return prefix.map(ReplicationFilter.idPrefix) ?? .all }
        let admitted = documentIDs.filter { id in prefix.map { id.hasPrefix($0) } ?? true }
        return admitted.isEmpty ? nil : .documentIDs(admitted)
    }
}
