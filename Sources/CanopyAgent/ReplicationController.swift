import CanopyAdmin
import CanopyCore
import CanopyCrypto
import CanopyReplication
import CanopyWire
import DequeModule

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

    /// What each replicating peer has acknowledged of `database`, and what it said of
    /// `documentID`, sorted by node id (`why`).
    func delivery(of documentID: String, in database: DatabaseName, _ completion: @escaping @Sendable ([PeerDelivery]) -> Void)

    /// Compares `database` with the peer over its replication connection
    /// (`Protocol/digests.md` §6); nil when no replicator runs for that database with the peer.
    func compare(
        peer nodeID: String, database: DatabaseName, prefix: String, differencesMax: Int, timeoutSeconds: Double,
        _ completion: @escaping @Sendable (Result<DigestCompareOutcome, DigestCompareFailure>?) -> Void)

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

/// What the engine knows of one peer's intake of a document (`ReplicationController.delivery`).
package struct PeerDelivery: Sendable {
    package var nodeID: String
    /// Whether a replicator runs for the database with the peer.
    package var replicating: Bool
    package var connected: Bool
    /// When the connection last went down (wall-clock seconds); nil while connected or never.
    package var disconnectedAt: Double?
    /// The newest sequence of this node's the peer acknowledged having; nil when none.
    package var acknowledged: UInt64?
    /// What the peer subscribed for, once a session told it.
    package var intake: PeerIntake?
    /// The peer's refusal of the document, when it refused it last time it was sent.
    package var refusal: RecentRefusals.Refusal?
}

/// The documents a peer refused most recently, with the revision and its reason, at most
/// `AgentLimits.refusedDocumentsKept` (the oldest make room). Pure.
package struct RecentRefusals: Sendable {
    package struct Refusal: Sendable, Equatable {
        package var revision: RevisionID?
        package var reason: String
    }

    private var byDocument: [String: Refusal] = [:]
    private var order = Deque<String>()

    package init() {}

    package mutating func record(_ documentID: String, revision: RevisionID?, reason: String) {
        if byDocument.updateValue(Refusal(revision: revision, reason: String(reason.prefix(500))), forKey: documentID) == nil {
            order.append(documentID)
        }
        while order.count > AgentLimits.refusedDocumentsKept, let oldest = order.popFirst() { byDocument[oldest] = nil }
    }

    package mutating func forget(_ documentID: String) {
        guard byDocument.removeValue(forKey: documentID) != nil else { return }
        order.removeAll { $0 == documentID }
    }

    package func refusal(of documentID: String) -> Refusal? { byDocument[documentID] }

    package var isEmpty: Bool { byDocument.isEmpty }
}
