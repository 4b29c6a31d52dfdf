import CanopyCore
import CanopyReplication

/// The admin protocol's commands, one type each (Protocol/admin-v1.md §6), and the rows their
/// replies carry. A command's type is named for what it does; its `name` is the `cmd` on the wire.
public enum Admin {}

// MARK: Counts and rows shared by several replies

extension Admin {
    /// A database's document counts, as CouchDB counts them: `docCount` the documents that exist,
    /// `docDelCount` the deleted ones (tombstones, which replicate). `status`, `stats` and each
    /// `db.list` row carry them at their top level.
    public struct DatabaseCounts: Codable, Sendable, Equatable, AdminFlattened {
        public var docCount: Int64
        public var docDelCount: Int64
        /// The database's last sequence.
        public var updateSeq: Int64
        public var conflictedCount: Int64
        /// Revisions from peers that wait for their attachment content.
        public var awaitingAttachments: Int64
        /// The database's digest, 64 hex digits (`Protocol/digests.md`): equal on two nodes
        /// exactly when they hold the same documents with the same open leaves. Every agent
        /// sends it; nil only from an agent built before digests.
        public var digest: String?

        public init(docCount: Int64, docDelCount: Int64, updateSeq: Int64, conflictedCount: Int64, awaitingAttachments: Int64, digest: String?) {
            self.docCount = docCount
            self.docDelCount = docDelCount
            self.updateSeq = updateSeq
            self.conflictedCount = conflictedCount
            self.awaitingAttachments = awaitingAttachments
            self.digest = digest
        }
    }

    /// A `[rule NAME]` section: what it matches (null for what it does not look at) and its
    /// strategy, as the config file spells them.
    public struct Rule: Codable, Sendable, Equatable, AdminExplicitNulls {
        public var name: String
        public var prefix: String?
        public var field: String?
        public var value: String?
        public var strategy: String

        public init(name: String, prefix: String?, field: String?, value: String?, strategy: String) {
            self.name = name
            self.prefix = prefix
            self.field = field
            self.value = value
            self.strategy = strategy
        }
    }

    /// A document found damaged: where, and what is wrong (`rev` when the damage is in one
    /// revision).
    public struct Damage: Codable, Sendable, Equatable {
        public var db: String?
        public var doc: String
        public var rev: String?
        public var reason: String

        public init(db: String? = nil, doc: String, rev: String? = nil, reason: String) {
            self.db = db
            self.doc = doc
            self.rev = rev
            self.reason = reason
        }
    }

    /// Progress of a replication: changes entries completed of those known so far.
    public struct Progress: Codable, Sendable, Equatable {
        public var completed: Int64
        public var total: Int64

        public init(completed: Int64, total: Int64) {
            self.completed = completed
            self.total = total
        }
    }

    /// A configured peer, its replication and its connection: the one shape of a peer's status,
    /// in `status`, `peers` and the library. The replication members are the `default`
    /// database's; `databases` has one row per database replicated with the peer.
    public struct PeerStatus: Codable, Sendable, Equatable, AdminExplicitNulls {
        public var nodeID: String
        /// Where the agent dials it (`HOST:PORT`); nil when it only accepts the peer's connections.
        public var address: String?
        /// Which way `default` replicates with it: `push`, `pull`, `both` or `none`.
        public var direction: String
        public var mode: ReplicationMode
        /// Whether a session with the peer is open now.
        public var connected: Bool
        public var state: ReplicatorState
        public var lastPushedSeq: Int64?
        public var lastPulledSeq: Int64?
        /// Local changes not yet pushed, when known.
        public var pending: Int64?
        public var progress: Progress
        /// The last error; cleared when a new session starts.
        public var lastError: String?
        /// Documents the peer sent that this node refused, since the agent started, and the last.
        public var rejected: Int64
        public var lastRejection: String?
        /// Documents this node pushed that the peer refused, and the last, with the peer's reason.
        public var refusedByPeer: Int64
        public var lastRefusedByPeer: String?
        /// Sessions closed because the peer broke the protocol, and the last.
        public var protocolViolations: Int64
        public var lastProtocolViolation: String?
        public var databases: [PeerDatabaseStatus]

        public init(
            nodeID: String, address: String?, direction: String, mode: ReplicationMode, connected: Bool, state: ReplicatorState,
            lastPushedSeq: Int64? = nil, lastPulledSeq: Int64? = nil, pending: Int64? = nil, progress: Progress = Progress(completed: 0, total: 0),
            lastError: String? = nil, rejected: Int64 = 0, lastRejection: String? = nil, refusedByPeer: Int64 = 0,
            lastRefusedByPeer: String? = nil, protocolViolations: Int64 = 0, lastProtocolViolation: String? = nil,
            databases: [PeerDatabaseStatus] = []
        ) {
            self.nodeID = nodeID
            self.address = address
            self.direction = direction
            self.mode = mode
            self.connected = connected
            self.state = state
            self.lastPushedSeq = lastPushedSeq
            self.lastPulledSeq = lastPulledSeq
            self.pending = pending
            self.progress = progress
            self.lastError = lastError
            self.rejected = rejected
            self.lastRejection = lastRejection
            self.refusedByPeer = refusedByPeer
            self.lastRefusedByPeer = lastRefusedByPeer
            self.protocolViolations = protocolViolations
            self.lastProtocolViolation = lastProtocolViolation
            self.databases = databases
        }
    }

    /// One database's replication with a peer, under the peer's row.
    public struct PeerDatabaseStatus: Codable, Sendable, Equatable, AdminExplicitNulls {
        public var db: String
        /// What the peer may do to this node's copy: `read`, `write` or `read-write`.
        public var access: String
        /// Only documents whose id starts with it, when set.
        public var prefix: String?
        public var state: ReplicatorState
        public var lastPushedSeq: Int64?
        public var lastPulledSeq: Int64?
        public var rejected: Int64
        public var lastRejection: String?
        public var refusedByPeer: Int64
        public var lastRefusedByPeer: String?
        public var lastError: String?
        /// What the peer takes of this node's changes (`everything`, `nothing`, `ids starting P`,
        /// `N document ids`), when this node pushes and the peer has said.
        public var peerTakes: String?

        public init(
            db: String, access: String, prefix: String?, state: ReplicatorState, lastPushedSeq: Int64?, lastPulledSeq: Int64?,
            rejected: Int64, lastRejection: String?, refusedByPeer: Int64, lastRefusedByPeer: String?, lastError: String?, peerTakes: String?
        ) {
            self.db = db
            self.access = access
            self.prefix = prefix
            self.state = state
            self.lastPushedSeq = lastPushedSeq
            self.lastPulledSeq = lastPulledSeq
            self.rejected = rejected
            self.lastRejection = lastRejection
            self.refusedByPeer = refusedByPeer
            self.lastRefusedByPeer = lastRefusedByPeer
            self.lastError = lastError
            self.peerTakes = peerTakes
        }
    }

    /// A node that connected with a valid handshake but is not allowed (Syncthing's pending
    /// devices).
    public struct PendingPeer: Codable, Sendable, Equatable {
        public var nodeID: String
        /// Where it connected from: its side of that connection, not where it listens.
        public var address: String
        public var attempts: Int64
        /// When it last tried, in seconds since 1970.
        public var lastSeen: Double

        public init(nodeID: String, address: String, attempts: Int64, lastSeen: Double) {
            self.nodeID = nodeID
            self.address = address
            self.attempts = attempts
            self.lastSeen = lastSeen
        }
    }

    /// A registered resolver client: what it claims (`prefix`: null for what rules route to it,
    /// `""` for every id no rule covers) and its offers.
    public struct ResolverRow: Codable, Sendable, Equatable, AdminExplicitNulls {
        public var name: String
        public var prefix: String?
        public var offered: Int64
        public var waiting: Int64

        public init(name: String, prefix: String?, offered: Int64, waiting: Int64) {
            self.name = name
            self.prefix = prefix
            self.offered = offered
            self.waiting = waiting
        }
    }
}

// MARK: The node

extension Admin {
    /// `status`: the node, its `default` database's counts, its rules, resolvers and peers.
    public struct Status: AdminCommand {
        public static let name = "status"
        public init() {}

        public struct Reply: Codable, Sendable, Equatable, AdminExplicitNulls {
            public var nodeID: String
            public var listen: String
            /// `open`, or `private` with a network key.
            public var network: String
            public var adminSocket: String
            public var dataDir: String
            /// The catch-all conflict strategy, as the config file spells it.
            public var conflicts: String
            public var rules: [Rule]
            public var resolvers: [ResolverRow]
            public var uptimeSeconds: Double
            /// Documents found damaged since the agent started, and the last.
            public var damaged: Int64
            public var lastDamage: Damage?
            public var counts: DatabaseCounts
            /// Conflicted documents kept for a resolver client, and those kept for `resolve`.
            public var conflictsAwaitingResolver: Int64
            public var conflictsKept: Int64
            public var peers: [PeerStatus]

            public init(
                nodeID: String, listen: String, network: String, adminSocket: String, dataDir: String, conflicts: String, rules: [Rule],
                resolvers: [ResolverRow], uptimeSeconds: Double, damaged: Int64, lastDamage: Damage?, counts: DatabaseCounts,
                conflictsAwaitingResolver: Int64, conflictsKept: Int64, peers: [PeerStatus]
            ) {
                self.nodeID = nodeID
                self.listen = listen
                self.network = network
                self.adminSocket = adminSocket
                self.dataDir = dataDir
                self.conflicts = conflicts
                self.rules = rules
                self.resolvers = resolvers
                self.uptimeSeconds = uptimeSeconds
                self.damaged = damaged
                self.lastDamage = lastDamage
                self.counts = counts
                self.conflictsAwaitingResolver = conflictsAwaitingResolver
                self.conflictsKept = conflictsKept
                self.peers = peers
            }
        }
    }

    /// `stats`: the `default` database's counts and the agent's traffic.
    public struct Stats: AdminCommand {
        public static let name = "stats"
        public init() {}

        public struct Reply: Codable, Sendable, Equatable {
            public var counts: DatabaseCounts
            public var revsLimit: Int64
            public var adminClients: Int64
            public var uptimeSeconds: Double
            /// Bytes on all peer TCP connections since start, handshake and encryption included.
            public var peerBytesSent: Int64
            public var peerBytesReceived: Int64

            public init(counts: DatabaseCounts, revsLimit: Int64, adminClients: Int64, uptimeSeconds: Double, peerBytesSent: Int64, peerBytesReceived: Int64) {
                self.counts = counts
                self.revsLimit = revsLimit
                self.adminClients = adminClients
                self.uptimeSeconds = uptimeSeconds
                self.peerBytesSent = peerBytesSent
                self.peerBytesReceived = peerBytesReceived
            }
        }
    }

    /// `reload`: reads the config file again and applies it.
    public struct Reload: AdminCommand {
        public static let name = "reload"
        public init() {}

        public struct Reply: Codable, Sendable, Equatable {
            /// The settings whose new value takes effect only at a restart.
            public var restartRequired: [String]

            public init(restartRequired: [String]) { self.restartRequired = restartRequired }
        }
    }

    /// `shutdown`: stops the agent as SIGTERM does; the connection stays open until it has.
    public struct Shutdown: AdminCommand {
        public static let name = "shutdown"
        public init() {}

        public struct Reply: Codable, Sendable, Equatable {
            /// The data directory's lock file, free once the process has exited.
            public var lockPath: String

            public init(lockPath: String) { self.lockPath = lockPath }
        }
    }
}

// MARK: Peers

extension Admin {
    /// `peers`: the configured peers, and the nodes refused because they are not.
    public struct Peers: AdminCommand {
        public static let name = "peers"
        public init() {}

        public struct Reply: Codable, Sendable, Equatable {
            public var peers: [PeerStatus]
            public var pending: [PendingPeer]

            public init(peers: [PeerStatus], pending: [PendingPeer]) {
                self.peers = peers
                self.pending = pending
            }
        }
    }

    /// The reply of the peer commands: the peer, its node id in canonical form.
    public struct PeerReply: Codable, Sendable, Equatable {
        public var nodeID: String

        public init(nodeID: String) { self.nodeID = nodeID }
    }

    /// A peer's section, as `peer.add` and `peer.accept` write it: the node, where it is dialled
    /// (`HOST:PORT`; `-` or none: never dial, accept its connections), which way `default`
    /// replicates with it (default `both`) and whether continuously (default).
    public struct PeerSettings: Codable, Sendable, Equatable, AdminFlattened {
        public var nodeID: String
        public var address: String?
        public var direction: ReplicationDirection?
        public var mode: ReplicationMode?

        public init(nodeID: String, address: String? = nil, direction: ReplicationDirection? = nil, mode: ReplicationMode? = nil) {
            self.nodeID = nodeID
            self.address = address
            self.direction = direction
            self.mode = mode
        }
    }

    /// `peer.add {node_id, address?, direction?, mode?}`: allows a node and, with an address,
    /// dials it.
    public struct AddPeer: AdminCommand {
        public static let name = "peer.add"
        public typealias Reply = PeerReply
        public var peer: PeerSettings

        public init(_ peer: PeerSettings) { self.peer = peer }
    }

    /// `peer.accept {node_id, …}`: `peer.add` for a pending peer (`not_found` for another).
    public struct AcceptPeer: AdminCommand {
        public static let name = "peer.accept"
        public typealias Reply = PeerReply
        public var peer: PeerSettings

        public init(_ peer: PeerSettings) { self.peer = peer }
    }

    /// `peer.remove {node_id}`: no longer allows the node; its replication stops.
    public struct RemovePeer: AdminCommand {
        public static let name = "peer.remove"
        public typealias Reply = PeerReply
        public var nodeID: String

        public init(nodeID: String) { self.nodeID = nodeID }
    }
}
