import CanopyAdmin
import CanopyCore
import CanopyReplication
import CanopyStore
import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// How `canopyd run` starts an agent.
public struct AgentOptions: Sendable {
    /// The data directory.
    public var directory: DataDirectory
    /// Overrides the config file's `listen` for this run.
    public var listen: HostPort?
    /// Overrides the admin socket path (default `DIR/admin.sock`).
    public var adminSocketPath: String?
    /// Where the agent logs.
    public var logger: Logger
    /// The directory's lock when the caller took it already (an embedding `Node` that
    /// initialises the directory first); `nil` makes the agent take it.
    package var heldLock: DirectoryLock?
    /// Whether the lock stays held after shutdown until the process exits (`canopyd`, whose
    /// `whenStopped` ends the process): a `canopyctl shutdown` that waits for the free lock then
    /// returns only once the agent's process is gone. An embedding application keeps the default,
    /// the lock let go when the agent has stopped, so it can open the node again at once.
    package var keepsLockUntilProcessExit = false
    /// Whether each database file is checked whole (SQLite's `integrity_check`) before the agent
    /// serves it, and a damaged one refused: `canopyd` does (Tools/canopyd/README.md, *Damage*);
    /// an embedding `Node` does not unless asked, and runs the check when it chooses
    /// (`Node.check`). The check reads the whole file: seconds at a million documents.
    package var checksDatabasesOnOpen = true

    /// Creates options.
    public init(directory: DataDirectory, listen: HostPort? = nil, adminSocketPath: String? = nil, logger: Logger) {
        self.directory = directory
        self.listen = listen
        self.adminSocketPath = adminSocketPath
        self.logger = logger
    }
}

/// The running agent: owns the data directory lock, the store, the config, the admin socket, the
/// peer connections and the replication controller, and wires them together.
///
/// Threading (one serial queue per stateful object, `Protocol/design.md` §9.6): `queue` guards the
/// agent's own state (config, listening sockets, damage seen, shutdown) and that of the parts it
/// shares it with (the event hub, the pending peers, the resolver); the store is used only on
/// `storeQueue`, so a slow import never delays `status`; replication runs on `replicationQueue`;
/// sockets run on their own queues. Public methods enqueue.
///
/// One concern a file: this one holds the state and the lifecycle (`init`, `start`, `shutdown`);
/// admin commands are routed in `Agent+Commands` to handlers in `Agent+Status`, `Agent+Config`,
/// `Agent+Replication`, `Agent+Documents`, `Agent+Transfer`, `Agent+Backup` and `ResolverBroker`;
/// events go through the `EventHub`, inbound peers through `InboundPeers`, store damage through
/// `Agent+Damage`.
public final class Agent: @unchecked Sendable {
    let queue = DispatchQueue(label: "canopy.agent")
    let storeQueue = DispatchQueue(label: "canopy.agent.store")
    /// Where `status` reads the store's counts: not behind the document commands on
    /// `storeQueue` (60 slow `get`s of a large document delayed `status` by seconds), so the
    /// operator is answered whatever the clients ask. The store is thread-safe; only these
    /// reads of the `default` store run here.
    let operatorQueue = DispatchQueue(label: "canopy.agent.operator")
    /// The replication engine's serial context (its scheduler and every peer transport).
    let replicationQueue = DispatchQueue(label: "canopy.replication")
    let options: AgentOptions
    let logger: Logger
    let identity: AgentIdentity
    /// The `default` database's store, the one replication uses (an embedding application reads
    /// and writes it directly).
    package let store: DocumentStore
    /// Every open database, `default` included (changed on `storeQueue`).
    let databases: DatabaseRegistry
    /// Databases peers asked for that are not shared with them (`db.pending`).
    let pendingShares: PendingShares
    let notifier: SystemdNotifier
    /// The data directory's lock, held from `init` until a shutdown has finished, or until the
    /// process exits under `keepsLockUntilProcessExit` (on `queue` after `init`).
    private var lock: DirectoryLock?
    let startedAt: Double

    /// The config in force, on `queue`: the file's, with `--listen` and the restart-only settings
    /// kept from start-up (`applyConfig`).
    var config: AgentConfig
    /// The config file as last read or written, on `queue`; `peer.*` commands edit it.
    var configFile: ConfigFile
    /// Every event, numbered, and the clients streaming them; shares `queue`.
    let events: EventHub
    /// The TCP side of peers: listener, handshakes, dialling.
    let peers: PeerConnectionManager
    /// Where the connection manager reports inbound peers; holds the pending ones, on `queue`.
    let inbound: InboundPeers
    let replication: any ReplicationController
    /// Resolvers connected over the admin socket and the conflicts waiting for them; on `queue`.
    private(set) lazy var resolvers = ResolverHub(agent: self)
    /// The bound sockets, once `start` has bound them; on `queue`.
    var listening: Listening?
    /// Damage found in the store since start-up; on `queue`.
    var damageFound: DamageFound
    /// Where a shutdown stands; on `queue`.
    private var shutdownProgress: ShutdownProgress

    /// Takes the lock, loads identity and config, opens every database. Nothing listens yet.
    ///
    /// The parts that report to the agent report to objects of their own, not to the agent, so
    /// each is built from the ones before it and none waits for `self`: the event hub (on
    /// `queue`) first; the connection manager; the replication controller, which dials through
    /// the manager and reports to the hub (its `ReplicationEventSink`); then `InboundPeers`,
    /// which hands accepted peers to the controller. The manager, built before `InboundPeers`,
    /// is given it by `start` with the listener: until it listens it has nothing to report.
    public init(
        options: AgentOptions, environment: [String: String], whenStopped: @escaping @Sendable () -> Void = {}
    ) throws(AgentError) {
        var kept = options
        kept.heldLock = nil  // `lock` holds it, and lets it go when the agent has stopped
        self.options = kept
        self.logger = options.logger
        shutdownProgress = ShutdownProgress(whenStopped: whenStopped)
        let directory = options.directory
        try directory.requireNoUnfinishedBackup()
        try directory.requireInitialized()
        if let held = options.heldLock { lock = held } else { lock = try DirectoryLock(path: directory.lockPath) }
        Self.removeUploadLeftovers(in: directory, logger: options.logger)
        identity = try AgentIdentity.load(path: directory.identityPath)
        configFile = try ConfigFile.read(directory.configPath, ownNodeID: identity.nodeID)
        config = configFile.parsed.config
        if let listen = options.listen { config.listen = listen }
        store = try Self.openStore(
            config.database(.default)!, in: directory, resolvingKeptConflicts: false, attachmentSizeLimit: config.attachmentSizeLimit,
            checking: options.checksDatabasesOnOpen)
        var open: [DatabaseName: DocumentStore] = [.default: store]
        for database in config.databases {
            open[database.name] = try Self.openStore(
                database, in: directory, resolvingKeptConflicts: true, attachmentSizeLimit: config.attachmentSizeLimit,
                checking: options.checksDatabasesOnOpen)
        }
        databases = DatabaseRegistry(open)
        damageFound = DamageFound(log: RateLimitedLog(logger: options.logger))
        notifier = SystemdNotifier(environment: environment)
        startedAt = Self.wallClock()
        events = EventHub(queue: queue)
        peers = PeerConnectionManager(
            identity: identity.identity, networkKey: config.networkKey,
            deliveryQueue: replicationQueue, logger: logger)
        pendingShares = PendingShares(path: directory.pendingSharesPath, logger: logger)
        let pendingShares = self.pendingShares
        let events = self.events
        replication = EngineReplication(
            queue: replicationQueue, databases: databases, connectionID: Array(identity.identity.nodeID.publicKey.prefix(16)),
            manager: peers, logger: logger, sink: events,
            onOffer: { [logger = options.logger] nodeID, database in
                switch pendingShares.record(ShareKey(database, nodeID), at: Agent.wallClock()) {
                case .new: events.emit(Admin.SharePending(nodeID: nodeID, db: database.text))
                case .again: break
                case .dismissed: logger.debug("refused a request for a dismissed database offer", metadata: ["db": "\(database)", "peer": "\(nodeID)"])
                }
            })
        inbound = InboundPeers(queue: queue, events: events, replication: replication)
        for (name, store) in databases.sorted {
            store.setDamageHandler { [weak self] damage in self?.storeFoundDamage(damage, in: name) }
        }
    }

    /// The node id.
    public var nodeID: String { identity.nodeID }

    /// The peer listener's bound address (the real port when the config asks for port 0), once
    /// `start` has bound it. Not to be called on the agent's queue.
    package var listenAddress: HostPort? { queue.sync { listening?.address } }

    /// Binds the admin socket and the peer listener, applies the config, and tells systemd it is
    /// ready. Throws if either socket cannot be bound (a live agent on the admin socket included).
    public func start() throws(AgentError) {
        let socketPath = options.adminSocketPath ?? options.directory.adminSocketPath
        let server = try AdminServer(path: socketPath, handler: self, logger: logger)
        let port: UInt16
        do throws(AgentError) {
            port = try peers.start(listen: config.listen, events: inbound)
        } catch {
            server.stop()
            throw error
        }
        let bound = queue.sync {
            let bound = Listening(admin: server, address: HostPort(host: config.listen.host, port: port))
            listening = bound
            peers.allow(config.peers)
            replication.apply(config: config)
            events.observeDocuments { [unowned self] events, peer, database in resolvers.observe(events, peer: peer, database: database) }
            // Conflicts kept before the restart: settled now if their rule can, offered when their
            // resolver registers.
            resolvers.scan()
            return bound.address
        }
        // Logged before the first client is served: a client that connects finds the line there.
        logger.info("canopyd \(identity.nodeID) listening on \(bound) (admin socket \(socketPath))")
        server.start()
        events.emit(Admin.AgentStarted(nodeID: identity.nodeID, listen: bound.description))
        notifier.ready(status: "listening on \(bound)")
    }

    /// Shuts down cleanly: stops accepting, lets replication finish its batch and checkpoint,
    /// closes connections, removes the admin socket, then calls `completion` (once, even if
    /// asked several times). Work still running after `AgentLimits.shutdownGraceSeconds` is abandoned.
    public func shutdown(_ completion: @escaping @Sendable () -> Void) {
        queue.async { [self] in
            guard !shutdownProgress.finished else { return completion() }
            shutdownProgress.waiters.append(completion)
            guard !shutdownProgress.begun else { return }
            shutdownProgress.begun = true
            notifier.stopping()
            logger.info("shutting down")
            events.emit(Admin.AgentStopping())
            let finished = DispatchGroup()
            finished.enter()
            replication.shutdown { finished.leave() }
            finished.enter()
            resolvers.drain { finished.leave() }
            finished.notify(queue: queue) { self.finishShutdown() }
            queue.asyncAfter(deadline: .now() + AgentLimits.shutdownGraceSeconds) { self.finishShutdown() }
        }
    }

    private func finishShutdown() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !shutdownProgress.finished else { return }
        shutdownProgress.finished = true
        peers.stop()
        listening?.admin.stop()
        // Let a store operation in flight commit, then leave everything in each database file
        // itself: a backup of the file alone after a clean stop must not lose the last transactions.
        storeQueue.sync {
            for (name, store) in databases.sorted {
                let file = options.directory.databasePath(name)
                do {
                    if try !store.checkpointAndTruncateLog() {
                        logger.warning("the write-ahead log could not be emptied at shutdown; keep \(file)-wal with \(file)")
                    }
                } catch {
                    logger.warning("checkpointing the write-ahead log of \(file) at shutdown failed", metadata: ["error": "\(error)"])
                }
            }
        }
        // Everything is checkpointed and nothing runs any more: the directory is free for another
        // agent (an application may open its node again at once). canopyd's process keeps the
        // lock until it exits, which `whenStopped` does next: the kernel lets go of it then.
        if !options.keepsLockUntilProcessExit { lock = nil }
        let waiters = shutdownProgress.waiters
        shutdownProgress.waiters = []
        for waiter in waiters { waiter() }
        shutdownProgress.whenStopped()
    }

    /// Seconds since the Unix epoch (event timestamps and uptime; never used for decisions).
    static func wallClock() -> Double {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
    }
}

/// The sockets `start` bound: the admin socket's server and the peer listener's address.
struct Listening {
    let admin: AdminServer
    let address: HostPort
}

/// Where a shutdown stands (`Agent.shutdown`).
private struct ShutdownProgress {
    /// Called once when a shutdown has finished, whoever asked for it (a signal or the admin
    /// `shutdown` command); `canopyd` exits the process here.
    let whenStopped: @Sendable () -> Void
    /// A shutdown has begun: a second request only waits for it.
    var begun = false
    /// It has finished: a later request completes at once.
    var finished = false
    /// The completions of every request, called when it finishes.
    var waiters: [@Sendable () -> Void] = []
}
