import CanopyAdmin
import CanopyCore
import CanopyCrypto
import CanopyReplication
import CanopyWire

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
    func statuses(_ completion: @escaping @Sendable ([Admin.PeerStatus]) -> Void)

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
