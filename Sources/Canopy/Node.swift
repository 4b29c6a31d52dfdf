import CanopyAdmin
import CanopyAgent
import CanopyCore
import CanopyStore
import Logging

/// A whole Canopy node inside the application: the agent `canopyd run` starts (data directory,
/// identity, TCP listener, handshake and encrypted channel, replication engine), its database,
/// and replicators to other nodes.
///
/// ```swift
/// let node = try Node(directory: "/var/lib/notes")
/// try node.database.save(Note(title: "Groceries", text: "milk"), id: "note:1")
/// node.replicator(ReplicatorConfiguration(peer: other, address: "10.0.0.2:4987")).start()
/// ```
///
/// The data directory is the agent's: `canopyd init`'s layout (identity, `canopy.conf`,
/// `canopy.sqlite`), so a directory made by `canopyd init` opens here and one made here runs
/// under `canopyd`, one process at a time (the directory is locked). The node also serves the
/// agent's admin socket, `DIR/admin.sock`, inside the directory (mode 0700, and the socket
/// checks the caller's uid): `canopyctl --data-dir DIR` can then inspect and steer a running
/// application the way it does `canopyd`. Replicators write their peers into `canopy.conf`, as
/// `canopyctl peer add` does, so they come back when the node is opened again.
///
/// Thread safety: every member may be used from any thread or task; the agent serialises its
/// work on its own queues. The node runs until `stop()`; releasing it does not stop it.
public final class Node: Sendable {
    /// This node's id: what another node passes as `ReplicatorConfiguration.peer` to replicate
    /// with it.
    public let nodeID: String
    /// Where the node accepts peers, `HOST:PORT`, with the port actually bound (a free one when
    /// `listen` asked for port 0): what another node passes as `ReplicatorConfiguration.address`.
    public let listenAddress: String
    /// The data directory the node was opened in, as given.
    public let directory: String
    /// The node's documents: writes made here replicate to peers, and peers' writes appear here
    /// (in its changes feed too).
    public let database: Database
    private let agent: Agent

    /// Opens the node in `directory`, creating and initialising the directory first if it holds
    /// no node yet (as `canopyd init` does: a new identity and a config file), and starts it,
    /// listening for peers on `listen` (`HOST:PORT`; port 0 picks a free one; it overrides the
    /// config file's `listen`). The agent logs through `logger`; the library never bootstraps
    /// logging.
    ///
    /// Fails with `NodeError` when `listen` is malformed, the directory cannot be created or is
    /// in use by another process, a database file cannot be opened as one, it is a backup that did
    /// not finish (`canopyctl backup`), or the port cannot be bound. Opening does not read the
    /// whole file: ``check(attachments:)`` does, and ``Options/checksDatabasesOnOpen`` makes
    /// opening refuse a damaged file as `canopyd` does.
    public convenience init(directory: String, listen: String = "127.0.0.1:0", logger: Logger = Logger(label: "canopy.node")) throws(NodeError) {
        try self.init(directory: directory, options: Options(listen: listen, logger: logger))
    }

    /// Opens and starts the node in `directory` as `options` say; `canopyd run` is this
    /// initialiser and signal handling. Fails with `NodeError` as the other initialiser does, and
    /// when the directory holds no node and `options.createIfMissing` is false.
    public init(directory: String, options: Options) throws(NodeError) {
        let address = try options.listen.map { listen throws(NodeError) in try Self.listenAddress(listen) }
        let data = DataDirectory(path: directory)
        do throws(AgentError) {
            // The lock is taken once, for initialising and running both.
            var agentOptions = AgentOptions(directory: data, listen: address, adminSocketPath: options.adminSocket, logger: options.logger)
            agentOptions.keepsLockUntilProcessExit = options.keepsLockUntilProcessExit
            agentOptions.checksDatabasesOnOpen = options.checksDatabasesOnOpen
            try data.requireNoUnfinishedBackup()
            do {
                try data.requireInitialized()
            } catch .notInitialized where options.createIfMissing {
                agentOptions.heldLock = try AgentSetup.initializeKeepingLock(
                    directory: data, config: AgentConfig(listen: address ?? AgentConfig.defaultListen))
            }
            let agent = try Agent(options: agentOptions, environment: options.environment, whenStopped: options.onStopped)
            try agent.start()
            self.agent = agent
        } catch {
            throw NodeError(error.description)
        }
        nodeID = agent.nodeID
        self.directory = directory
        listenAddress = (agent.listenAddress ?? address ?? AgentConfig.defaultListen).description
        database = Database(store: agent.store)
    }

    /// How ``init(directory:options:)`` opens and runs a node.
    public struct Options: Sendable {
        /// Where to listen for peers, `HOST:PORT` (port 0 picks a free one); nil: the config
        /// file's `listen`.
        public var listen: String?
        /// The admin socket's path; nil: `DIR/admin.sock`.
        public var adminSocket: String?
        /// Whether a directory that holds no node yet is initialised (as ``Node/initialize(directory:listen:conflicts:)``
        /// does) or refused.
        public var createIfMissing: Bool
        /// The process environment the node reads: with `NOTIFY_SOCKET` in it, the node tells
        /// systemd when it is ready, reloading and stopping (pass the process's own environment
        /// in a service's main process only). Empty: nothing is read.
        public var environment: [String: String]
        /// Where the node logs; the library never bootstraps logging.
        public var logger: Logger
        /// Called once when the node has stopped, whatever stopped it: ``Node/stop()``,
        /// `canopyctl shutdown`, or a database file that vanished while it ran.
        public var onStopped: @Sendable () -> Void
        /// Whether the data directory's lock is held until the process exits rather than let go
        /// when the node stops: for `canopyd`, whose `onStopped` exits the process.
        package var keepsLockUntilProcessExit = false
        /// Whether opening checks each database file whole first and refuses a damaged one, as
        /// `canopyd` does: it reads the whole file (seconds at a million documents, more from a
        /// cold disk), so a node opens without it by default; run ``Node/check(attachments:)``
        /// when the application chooses. Damage in a document is found when it is read either way.
        public var checksDatabasesOnOpen = false

        /// Options: the config file's address, `DIR/admin.sock`, a missing directory
        /// initialised, no environment, unless told otherwise.
        public init(
            listen: String? = nil, adminSocket: String? = nil, createIfMissing: Bool = true, environment: [String: String] = [:],
            logger: Logger = Logger(label: "canopy.node"), onStopped: @escaping @Sendable () -> Void = {}
        ) {
            self.listen = listen
            self.adminSocket = adminSocket
            self.createIfMissing = createIfMissing
            self.environment = environment
            self.logger = logger
            self.onStopped = onStopped
        }
    }

    /// Turns off SQLite's memory statistics for the whole process, before any database opens
    /// (`CanopyStore`'s `Database.disableMemoryStatistics()` says why): for `canopyd`, which owns
    /// its process; a library embedded in an application leaves the application's SQLite alone.
    @discardableResult
    package static func disableStoreMemoryStatistics() -> Bool {
        CanopyStore.Database.disableMemoryStatistics()
    }

    /// `text` as the address a node listens on, or the error naming it.
    private static func listenAddress(_ text: String) throws(NodeError) -> HostPort {
        guard let address = HostPort(parsing: text) else { throw NodeError("\"\(text.prefix(80))\" is not HOST:PORT") }
        return address
    }

    /// Initialises `directory` as `canopyd init` does (creating it if needed): a new identity,
    /// a config file listening on `listen` whose catch-all conflict rule is `conflicts`, and the
    /// database. Returns the new node's id. Fails when the directory already holds a node.
    public static func initialize(
        directory: String, listen: String = "127.0.0.1:4987", conflicts: ResolutionStrategy = .automatic
    ) throws(NodeError) -> String {
        let address = try listenAddress(listen)
        do throws(AgentError) {
            return try AgentSetup.initialize(directory: DataDirectory(path: directory), config: AgentConfig(listen: address, conflicts: conflicts))
        } catch {
            throw NodeError(error.description)
        }
    }

    /// The id of the node whose data directory is `directory`, without opening it (it may be
    /// running in another process).
    public static func nodeID(directory: String) throws(NodeError) -> String {
        let data = DataDirectory(path: directory)
        do throws(AgentError) {
            try data.requireInitialized()
            return try AgentIdentity.load(path: data.identityPath).nodeID
        } catch {
            throw NodeError(error.description)
        }
    }

    /// Reads the config file again and applies it, as `canopyctl reload` and SIGHUP to `canopyd`
    /// do. Returns the settings that changed but need a restart to apply (`listen`, say); fails
    /// with the file's problem, and the running config stays as it was.
    ///
    /// A database whose policy the application set in its process
    /// (``Database/conflictResolution``: `.manual`, `.custom`, `.rules` with its own resolvers)
    /// keeps it: the file's `conflicts` and rules apply to the other databases, and to that one
    /// only when the node is opened again (the log says so at each reload). The conflicts kept so
    /// far are scanned again under the policy in force, the application's included.
    @discardableResult
    public func reload() async throws(NodeError) -> [String] {
        let result = await withCheckedContinuation { (done: CheckedContinuation<Result<[String], AgentError>, Never>) in
            agent.reload { done.resume(returning: $0) }
        }
        switch result {
        case .success(let settings): return settings
        case .failure(let error): throw NodeError(error.description)
        }
    }

    /// The database named `name` (`default` is ``database``), made by ``createDatabase(_:conflicts:)``
    /// here or by `canopyctl db create`.
    public func database(named name: String) throws(NodeError) -> Database {
        guard let database = DatabaseName(validating: name) else {
            throw NodeError(DatabaseName.refusal(of: name))
        }
        guard let store = agent.store(of: database) else { throw NodeError("no database \(database) on this node") }
        return Database(store: store)
    }

    /// Makes a database: its own file, revs limit and conflict setting (`conflicts`, as the
    /// config file's: `automatic`, `local-wins`, `remote-wins`, `merge-json`, `manual`), listed in
    /// the config file as `canopyctl db create` lists it. Names follow CouchDB's rule
    /// (`DatabaseName`).
    @discardableResult
    public func createDatabase(_ name: String, conflicts: String = "automatic") async throws(NodeError) -> Database {
        _ = try await command(Admin.CreateDatabase(name: name, conflicts: conflicts))
        return try database(named: name)
    }

    /// Deletes a database with every document in it (`default` cannot be deleted).
    public func deleteDatabase(_ name: String) async throws(NodeError) {
        _ = try await command(Admin.DeleteDatabase(name: name))
    }

    /// Lets the peer `nodeID` (a peer this node replicates with: a ``Replicator`` was made for it)
    /// read and/or write this node's copy of `database`, or only its documents whose id starts
    /// with `prefix`, as `canopyctl share` does: `.read`, the peer may pull from this node;
    /// `.write`, it may push into it; `.readWrite`, both. The database then replicates over the
    /// connection to that peer when the peer shares it too.
    public func share(_ database: String, with nodeID: String, access: ShareAccess, prefix: String? = nil) async throws(NodeError) {
        let granted: Admin.Access
        switch access {
        case .read: granted = .read
        case .write: granted = .write
        case .readWrite: granted = .readWrite
        case .none: throw NodeError("a share grants read, write or read-write; unshare(_:with:) takes a share away")
        }
        _ = try await command(Admin.ShareDatabase(db: database, nodeID: nodeID, access: granted, prefix: prefix))
    }

    /// Stops sharing `database` with the peer `nodeID`: it may no longer read or write it.
    public func unshare(_ database: String, with nodeID: String) async throws(NodeError) {
        _ = try await command(Admin.UnshareDatabase(db: database, nodeID: nodeID))
    }

    /// The peers this node allows (its allow-list, as `canopyctl peers` lists them), by node id.
    public func allowedPeers() async throws(NodeError) -> [String] {
        try await command(Admin.Peers()).peers.map(\.nodeID)
    }

    /// Nodes that connected and were refused because this node does not allow them (Syncthing's
    /// pending devices), most recent last; ``allow(_:address:)`` accepts one.
    public func pendingPeers() async throws(NodeError) -> [PendingPeer] {
        try await command(Admin.Peers()).pending.map { PendingPeer(nodeID: $0.nodeID, connectedFrom: $0.address, attempts: Int($0.attempts)) }
    }

    /// Allows the node `nodeID` to connect (and, with `address`, `HOST:PORT` of its listener,
    /// dials it), as `canopyctl peer add` does: it then shares `default` read-write. A pending
    /// peer is accepted this way.
    public func allow(_ nodeID: String, address: String? = nil) async throws(NodeError) {
        _ = try await command(Admin.AddPeer(Admin.PeerSettings(nodeID: nodeID, address: address ?? "-")))
    }

    /// No longer allows `nodeID`: replication with it stops and its connections are refused.
    public func disallow(_ nodeID: String) async throws(NodeError) {
        _ = try await command(Admin.RemovePeer(nodeID: nodeID))
    }

    /// Runs an admin command in this process, as the agent's socket would.
    private func command<C: AdminCommand>(_ command: C) async throws(NodeError) -> C.Reply {
        do {
            return try await agent.perform(command)
        } catch {
            throw NodeError(error.message)
        }
    }

    /// Compacts as `canopyctl compact` does: drops the bodies of old revisions (keeping each open
    /// conflict's common ancestor) of `database` (every database when nil) and rebuilds their
    /// files, then removes the attachment content no kept revision of any of the node's databases
    /// names (they share the node's attachment directory). Content a write about to name it or a
    /// reader holds at that moment stays until the next compaction. Document reads and writes
    /// wait while it runs.
    @discardableResult
    public func compact(database: String? = nil) async throws(NodeError) -> CompactionReport {
        let report = try await command(Admin.Compact(db: database))
        return CompactionReport(
            databases: report.databases, bodiesDropped: Int(report.bodiesDropped), attachmentsRemoved: Int(report.attachmentsRemoved),
            attachmentBytesFreed: report.attachmentBytesFreed, attachmentsKept: Int(report.attachmentsKept),
            attachmentsPinned: Int(report.attachmentsPinned))
    }

    /// Backs the node up as `canopyctl backup` does, while it runs: a new directory at `path`
    /// (absolute; it must not exist, or be empty) that restores as a data directory, with a
    /// consistent snapshot of every database, the attachment content their revisions name (each
    /// file checked against its digest as it is copied), the config file and, with
    /// `withIdentity`, the node's identity key (keep such a backup as private as the key). The
    /// directory holds `backup-unfinished` until every file is written and synced; content that
    /// could not be copied fails the call, naming it, and leaves that file in place, so the
    /// directory is never mistaken for a whole backup. A backup of one ``Database`` is
    /// `Database.backup(to:)`.
    @discardableResult
    public func backup(to path: String, withIdentity: Bool = false) async throws(NodeError) -> BackupReport {
        let reply = try await command(Admin.Backup(path: path, withIdentity: withIdentity))
        return BackupReport(documents: Int(reply.documents), attachments: Int(reply.attachments), attachmentBytes: reply.attachmentBytes)
    }

    /// Checks the node's files as `canopyctl check` does, while the node runs: SQLite's
    /// `integrity_check` of every database, every document row against its revisions and, with
    /// `attachments`, every attachment content against its digest. Damaged documents it finds
    /// are reported as reads report them (never sent to peers).
    public func check(attachments: Bool = true) async throws(NodeError) -> CheckReport {
        let report = try await command(Admin.Check(attachments: attachments))
        return CheckReport(
            sound: report.sound, problems: report.problems, documents: Int(report.documents), attachments: Int(report.attachments),
            attachmentBytes: report.attachmentBytes, leftovers: report.leftovers, seconds: report.seconds)
    }

    /// A replicator with the peer `configuration` names. Nothing happens until its `start()` or
    /// `sync()`.
    public func replicator(_ configuration: ReplicatorConfiguration) -> Replicator {
        Replicator(configuration: configuration, agent: agent)
    }

    /// Stops the node cleanly: stops accepting, lets each replication finish the batch in flight
    /// and write its checkpoint, closes the connections and the admin socket, and returns when
    /// all of that is done (work still running after a grace period is abandoned), releasing the
    /// data directory: a new `Node` may open it at once. Calling it again returns at once.
    public func stop() async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            agent.shutdown { done.resume() }
        }
    }
}

/// What ``Node/compact(database:)`` did.
public struct CompactionReport: Sendable, Equatable {
    /// The databases whose old bodies were dropped.
    public var databases: [String]
    /// Bodies of old revisions dropped.
    public var bodiesDropped: Int
    /// Attachment contents removed: no kept revision named them.
    public var attachmentsRemoved: Int
    /// The bytes those contents held.
    public var attachmentBytesFreed: Int64
    /// Attachment contents kept because a revision names them.
    public var attachmentsKept: Int
    /// Attachment contents no revision names that a write or a reader held during the
    /// compaction; the next compaction removes them if nothing names them by then.
    public var attachmentsPinned: Int
}

/// What ``Node/check(attachments:)`` found.
public struct CheckReport: Sendable, Equatable {
    /// No problem found: every database sound, no document damaged, and (when attachments were
    /// checked) every attachment content present and matching its digest.
    public var sound: Bool
    /// One line per problem: SQLite's report, then damaged documents and attachment content.
    public var problems: [String]
    /// Document rows read.
    public var documents: Int
    /// Attachment content files read and verified, and their bytes.
    public var attachments: Int
    public var attachmentBytes: Int64
    /// Files an upload cut short left (they take space; the node removes them when it next opens).
    public var leftovers: [String]
    /// How long the check took.
    public var seconds: Double
}

/// A node that connected and was refused because it is not allowed (``Node/pendingPeers()``).
public struct PendingPeer: Sendable, Equatable {
    /// Its node id, as ``Node/allow(_:address:)`` takes it.
    public var nodeID: String
    /// Where it connected from: its side of that connection (usually a temporary port), not
    /// where it listens.
    public var connectedFrom: String
    /// How many times it tried.
    public var attempts: Int

    /// Creates a pending peer.
    public init(nodeID: String, connectedFrom: String, attempts: Int) {
        self.nodeID = nodeID
        self.connectedFrom = connectedFrom
        self.attempts = attempts
    }
}

/// Why a `Node` could not be opened.
public struct NodeError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, for people (the path or address involved included).
    public var description: String

    /// Creates an error.
    public init(_ description: String) {
        self.description = description
    }
}
