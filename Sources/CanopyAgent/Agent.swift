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
public final class Agent: @unchecked Sendable {
    let queue = DispatchQueue(label: "canopy.agent")
    let storeQueue = DispatchQueue(label: "canopy.agent.store")
    /// The replication engine's serial context (its scheduler and every peer transport).
    let replicationQueue = DispatchQueue(label: "canopy.replication")
    let options: AgentOptions
    let logger: Logger
    let identity: AgentIdentity
    let store: DocumentStore
    let notifier: SystemdNotifier
    private let lock: DirectoryLock
    let startedAt: Double

    var config: AgentConfig
    var configText: String
    var parsedConfig: ParsedConfig
    /// Every event, numbered, and the clients streaming them; shares `queue`.
    let events: EventHub
    /// The TCP side of peers: listener, handshakes, dialling.
    let peers: PeerConnectionManager
    /// Where the connection manager reports inbound peers; holds the pending ones, on `queue`.
    let inbound: InboundPeers
    let replication: any ReplicationController
    /// The application resolver connected over the admin socket, if any; on `queue`.
    var resolver: ResolverBroker?
    var admin: AdminServer?
    var boundListen: HostPort?
    var damageFound = DamageFound()
    /// Error lines for damaged documents: a damaged file can hold many.
    let damageLog: RateLimitedLog
    var shuttingDown = false
    private var stopped = false
    private var shutdownWaiters: [@Sendable () -> Void] = []
    /// Called once when a shutdown has finished, whoever asked for it (a signal or the admin
    /// `shutdown` command); `canopyd` exits the process here.
    private let whenStopped: @Sendable () -> Void

    /// Takes the lock, loads identity and config, opens the store. Nothing listens yet.
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
        self.options = options
        self.whenStopped = whenStopped
        self.logger = options.logger
        let directory = options.directory
        try directory.requireInitialized()
        lock = try DirectoryLock(path: directory.lockPath)
        identity = try AgentIdentity.load(path: directory.identityPath)
        (configText, parsedConfig) = try Self.readConfig(directory.configPath)
        config = parsedConfig.config
        if let listen = options.listen { config.listen = listen }
        try directory.restrictDatabaseFiles()
        do {
            let storeConfiguration = DocumentStore.Configuration(
                revsLimit: config.revsLimit, conflictPolicy: config.conflicts == .manual ? .manual : .automatic,
                logger: Logger(label: "canopy.store"), checkpointInBackground: true)
            store = try DocumentStore(path: directory.databasePath, configuration: storeConfiguration)
        } catch {
            throw .store(error.description)
        }
        // A damaged file is not served: what it would send peers is wrong, and they would keep it.
        // quick_check reads every page once (O(file size); README, Limits) but skips matching
        // each index to its table, which `canopyctl check` does.
        let problems: [String]
        do { problems = try store.checkIntegrity(full: false) } catch { throw .store(error.description) }
        if !problems.isEmpty {
            throw .damagedDatabase(path: directory.databasePath, report: problems.joined(separator: "; "))
        }
        damageLog = RateLimitedLog(logger: options.logger)
        notifier = SystemdNotifier(environment: environment)
        startedAt = Self.wallClock()
        events = EventHub(queue: queue)
        peers = PeerConnectionManager(identity: identity.identity, deliveryQueue: replicationQueue, logger: logger)
        replication = EngineReplication(queue: replicationQueue, store: store, manager: peers, logger: logger, sink: events)
        inbound = InboundPeers(queue: queue, events: events, replication: replication)
        store.setDamageHandler { [weak self] damage in self?.storeFoundDamage(damage) }
    }

    /// The node id.
    public var nodeID: String { identity.nodeID }

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
        queue.sync {
            admin = server
            boundListen = HostPort(host: config.listen.host, port: port)
            peers.allow(config.peers)
            replication.apply(config: config)
        }
        server.start()
        logger.info("canopyd \(identity.nodeID) listening on \(boundListen!) (admin socket \(socketPath))")
        events.emit("agent.started", ["node_id": .string(identity.nodeID), "listen": .string(boundListen!.description)])
        notifier.ready(status: "listening on \(boundListen!)")
    }

    /// Shuts down cleanly: stops accepting, lets replication finish its batch and checkpoint,
    /// closes connections, removes the admin socket, then calls `completion` (once, even if
    /// asked several times). Work still running after `AgentLimits.shutdownGraceSeconds` is abandoned.
    public func shutdown(_ completion: @escaping @Sendable () -> Void) {
        queue.async { [self] in
            guard !stopped else { return completion() }
            shutdownWaiters.append(completion)
            guard !shuttingDown else { return }
            shuttingDown = true
            notifier.stopping()
            logger.info("shutting down")
            events.emit("agent.stopping", [:])
            let finished = DispatchGroup()
            finished.enter()
            replication.shutdown { finished.leave() }
            finished.notify(queue: queue) { self.finishShutdown() }
            queue.asyncAfter(deadline: .now() + AgentLimits.shutdownGraceSeconds) { self.finishShutdown() }
        }
    }

    private func finishShutdown() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !stopped else { return }
        stopped = true
        peers.stop()
        resolver?.stop()
        admin?.stop()
        // Let a store operation in flight commit, then leave everything in canopy.sqlite itself:
        // a backup of the file alone after a clean stop must not lose the last transactions.
        storeQueue.sync {
            do {
                if try !store.checkpointAndTruncateLog() {
                    logger.warning("the write-ahead log could not be emptied at shutdown; keep canopy.sqlite-wal with canopy.sqlite")
                }
            } catch {
                logger.warning("checkpointing the write-ahead log at shutdown failed", metadata: ["error": "\(error)"])
            }
        }
        let waiters = shutdownWaiters
        shutdownWaiters = []
        for waiter in waiters { waiter() }
        whenStopped()
    }

    /// Seconds since the Unix epoch (event timestamps and uptime; never used for decisions).
    static func wallClock() -> Double {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
    }
}
