import CanopyCore
import CanopyCrypto
import CanopyReplication
import CanopyWire

/// Per-peer replication status as `status` and `peers` report it.
public struct PeerReplicationStatus: Sendable, Equatable {
    /// The peer's node id.
    public var nodeID: String
    /// True while an authenticated connection to the peer is open.
    public var connected: Bool
    /// The replicator's state.
    public var state: ReplicatorState
    /// The last local sequence the peer has acknowledged (push checkpoint), if any.
    public var lastPushedSequence: Int64?
    /// The last sequence of the peer's feed received (pull checkpoint), if any.
    public var lastPulledSequence: Int64?
    /// Local changes not yet pushed, if known.
    public var pendingCount: Int64?
    /// Progress of the current or last replication.
    public var progress: ReplicationProgress
    /// The last error, if the state is `error` or `offline`.
    public var lastError: String?
    /// Documents this peer sent that this node refused (since the agent started).
    public var rejected: Int64 = 0
    /// The last refusal: the document and the reason.
    public var lastRejection: String?
    /// Documents this node pushed that the peer refused (since the agent started).
    public var refusedByPeer: Int64 = 0
    /// The last of those: the document and the peer's reason.
    public var lastRefusedByPeer: String?
    /// Each database replicated with the peer (the fields above are the `default` database's).
    public var databases: [PeerDatabaseStatus] = []
    /// Connections and database sessions with the peer closed because it broke the protocol,
    /// since the agent started, whichever database; and the last one: where it was found (the
    /// connection, or a database) and what.
    public var protocolViolations: Int64 = 0
    public var lastProtocolViolation: String?

    /// Creates a status.
    public init(
        nodeID: String, connected: Bool, state: ReplicatorState, lastPushedSequence: Int64? = nil,
        lastPulledSequence: Int64? = nil, pendingCount: Int64? = nil,
        progress: ReplicationProgress = ReplicationProgress(), lastError: String? = nil
    ) {
        self.nodeID = nodeID
        self.connected = connected
        self.state = state
        self.lastPushedSequence = lastPushedSequence
        self.lastPulledSequence = lastPulledSequence
        self.pendingCount = pendingCount
        self.progress = progress
        self.lastError = lastError
    }
}

/// One database's replication with a peer, as `peers` shows it under the peer's row.
public struct PeerDatabaseStatus: Sendable, Equatable {
    /// The database.
    public var database: DatabaseName
    /// What the peer may do to this node's copy (`read`, `write`, `read-write`).
    public var access: ShareAccess
    /// Only ids with this prefix, when set.
    public var prefix: String?
    /// The replicator's state for this database.
    public var state: ReplicatorState
    /// The sequences the peer confirmed and this node stored, as in the peer's row.
    public var lastPushedSequence: Int64?
    public var lastPulledSequence: Int64?
    /// Documents refused from the peer in this database since the agent started, and the last.
    public var rejected: Int64 = 0
    public var lastRejection: String?
    /// Documents of this database the peer refused since the agent started, and the last.
    public var refusedByPeer: Int64 = 0
    public var lastRefusedByPeer: String?
    /// Why the last channel for this database ended badly (the peer refused it, say).
    public var lastError: String?
    /// What the peer takes of this node's changes to the database, when this node pushes it
    /// (nil before the first connection's `hello`).
    public var peerIntake: PeerIntake?

    /// Creates a row.
    public init(database: DatabaseName, access: ShareAccess, prefix: String?, state: ReplicatorState) {
        self.database = database
        self.access = access
        self.prefix = prefix
        self.state = state
    }
}

/// What a completed `sync` did.
public struct SyncOutcome: Sendable, Equatable {
    /// Changes entries handled during this sync, in both directions (entries a peer already
    /// had count too: each was checked).
    public var completed: UInt64
    /// Documents from the peer this node refused during this sync.
    public var rejected: Int64
    /// The last of those refusals: the document and the reason.
    public var lastRejection: String?
    /// Documents this node pushed that the peer refused during this sync, and the last of them.
    public var refusedByPeer: Int64 = 0
    public var lastRefusedByPeer: String?
    /// Databases shared with the peer that it refused on this sync, with its words: it does not
    /// share them with this node, so nothing of them moved either way.
    public var notSharedByPeer: [DatabaseName: String] = [:]
    /// Documents this sync wrote from the peer, and documents of this node the peer stored.
    public var received: Int64 = 0
    public var sent: Int64 = 0
    /// Databases this node pushes of which the peer does not take every change (`PeerIntake`):
    /// it does not pull them from this node at all (`.nothing`), or only some ids. What this node
    /// writes outside of that stays here.
    public var peerTakesPart: [DatabaseName: PeerIntake] = [:]

    /// Creates an outcome.
    public init(completed: UInt64, rejected: Int64 = 0, lastRejection: String? = nil) {
        self.completed = completed
        self.rejected = rejected
        self.lastRejection = lastRejection
    }
}

/// Ends the wait of a `sync` whose caller went away (an admin client that closed, a cancelled
/// task): its completion is not called, and nothing else of the replication changes. Idempotent.
package final class SyncCancellation: Sendable {
    private let onCancel: @Sendable () -> Void

    init(_ onCancel: @escaping @Sendable () -> Void) { self.onCancel = onCancel }

    package func cancel() { onCancel() }
}

/// Why a `sync` did not complete.
public struct ReplicationFailure: Error, Sendable, Equatable {
    /// Machine-readable: `unknown_peer`, `unavailable`, `unreachable`, `protocol`, `cancelled`, `failed`.
    public var code: String
    /// For people.
    public var message: String

    /// Creates a failure.
    public init(code: String, message: String) {
        self.code = code
        self.message = message
    }
}

/// Where the replication engine reports what happens, so the agent can stream it to admin
/// clients. Called from any queue; the agent serialises.
public protocol ReplicationEventSink: AnyObject, Sendable {
    /// Records events in order (a replication batch reports one per document, which the sink
    /// should keep unrendered until someone reads them).
    func emit(batch: [AgentEvent.Content])

    /// Records a replication batch's document events of `database` concerning the peer
    /// `nodeID`, in order, as the engine reported them (one array for the whole batch: the sink
    /// should keep it).
    func emit(documentEvents: [DocumentEvent], peer nodeID: String, database: DatabaseName)
}

/// What the agent needs from replication. The agent owns sockets, config and the admin socket;
/// the engine (CanopyReplication, through `EngineReplication`) owns everything between an authenticated
/// message transport and the store.
///
/// All methods may be called from any queue and must not block; completions and callbacks may be
/// called on any queue.
package protocol ReplicationController: AnyObject, Sendable {
    /// The status of every configured or connected peer, sorted by node id.
    func statuses(_ completion: @escaping @Sendable ([PeerReplicationStatus]) -> Void)

    /// Runs a one-shot replication with `peer` in its configured direction. `progress` is called as
    /// work completes; `completion` exactly once, when the replication has finished or failed,
    /// unless the returned cancellation is used first (the caller went away): then never.
    @discardableResult
    func sync(
        peer nodeID: String,
        progress: @escaping @Sendable (ReplicationProgress) -> Void,
        completion: @escaping @Sendable (Result<SyncOutcome, ReplicationFailure>) -> Void) -> SyncCancellation

    /// The configuration changed (start, reload, `peer add/remove`): start replicators for new
    /// peers, stop those removed, apply new directions and modes.
    func apply(config: AgentConfig)

    /// An allowed peer dialled us and authenticated. The engine takes the transport over (or
    /// closes it: when a connection to that peer is already up, the simultaneous-connect rule of
    /// Protocol/replication-v1.md §4.7 decides which one survives, from `connection`).
    func accept(inbound transport: any ConnectionTransport, role: MultiplexStateMachine.Role, from nodeID: String,
                connection: SimultaneousConnect.Connection)

    /// Finish the batch in flight, write checkpoints, close transports; then call `completion`.
    func shutdown(_ completion: @escaping @Sendable () -> Void)
}
