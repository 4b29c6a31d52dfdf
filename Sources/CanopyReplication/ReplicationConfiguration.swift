import CanopyCore
import CanopyWire

/// How a node replicates with one peer. Replication is receiver-driven, like Syncthing and
/// Couchbase Lite's `subChanges`: the side that wants changes subscribes, the side that has them
/// streams. `direction` is therefore both an intention and a permission:
///
/// - `.pull`: subscribe to the peer's changes on connect; refuse the peer's subscriptions.
/// - `.push`: serve the peer's subscriptions; do not subscribe.
/// - `.both`: both.
///
/// Changes flow from A to B when A pushes and B pulls; two nodes configured `.both` sync both ways.
public struct ReplicationConfiguration: Sendable {
    /// Which ways changes may flow.
    public var direction: ReplicationDirection
    /// Keep streaming new changes after catching up (true), or stop when caught up (false).
    public var continuous: Bool
    /// Documents this node asks for when it pulls (sent to the peer in `subscribe`).
    public var pullFilter: ReplicationFilter
    /// Documents this node serves when the peer pulls, intersected with the peer's filter.
    public var pushFilter: ReplicationFilter
    /// Documents per `changes` batch.
    public var batchSize: Int
    /// `changes` batches in flight before the source waits for replies.
    public var window: Int
    /// Seconds of silence before a heartbeat is sent.
    public var heartbeatIntervalSeconds: Double
    /// Heartbeat intervals of silence from the peer before it is declared dead.
    public var deadPeerIntervals: Double
    /// Completed batches between checkpoint updates sent to the source (the local checkpoint is
    /// written after every durable batch; the remote copy only needs to be roughly current).
    public var remoteCheckpointEveryBatches: Int
    /// The name under which this node records how far the peer holds its changes (a peer
    /// horizon, `DocumentStore.recordPeerHorizon`; stemming keeps what the peer may still hold).
    /// Nil: the replication id of the peer's pull, in hex. `PeerReplicator` sets one per peer.
    public var peerHorizonKey: String?
    /// Copies of the peer's checkpoints kept for it in this database (one per replication id it
    /// sets; a peer has one per filter it pulls with); beyond it the one written longest ago goes
    /// (`PeerCheckpointKeeper`).
    public var peerCheckpointsMax = ReplicationConfiguration.peerCheckpointsMaxDefault
    /// The default `peerCheckpointsMax`: room for many filters, a bounded number of records.
    public static let peerCheckpointsMaxDefault = 64
    /// Settles the conflicts that revisions pulled by this replication create, instead of the
    /// store's `conflictPolicy`; when it settles kept conflicts, `PeerReplicator.start` also runs
    /// it over the conflicts the store keeps (one a resolver failed before, say). Nil: the
    /// store's policy decides.
    public var conflictPolicy: ConflictPolicy?
    /// Exists only to test receivers: when true, the subscriptions this node serves ignore the
    /// filter the peer subscribed with (`pushFilter` still applies), so the peer is offered and
    /// sent documents outside its subscription, as a peer that lies would be. Package access:
    /// neither the public API nor canopyd's configuration can set it.
    package var servesBeyondSubscriptions = false

    /// Defaults: both ways, continuous, unfiltered, 500 documents per batch, 8 batches in flight.
    public init(
        direction: ReplicationDirection = .both, continuous: Bool = true,
        pullFilter: ReplicationFilter = .all, pushFilter: ReplicationFilter = .all,
        batchSize: Int = 500, window: Int = 8,
        heartbeatIntervalSeconds: Double = 10, deadPeerIntervals: Double = 3,
        remoteCheckpointEveryBatches: Int = 1, peerHorizonKey: String? = nil, conflictPolicy: ConflictPolicy? = nil
    ) {
        precondition((1...WireLimits.changesEntriesMax).contains(batchSize), "batch size out of range")
        precondition((1...WireLimits.inFlightBatchesMax).contains(window), "window out of range")
        self.direction = direction
        self.continuous = continuous
        self.pullFilter = pullFilter
        self.pushFilter = pushFilter
        self.batchSize = batchSize
        self.window = window
        self.heartbeatIntervalSeconds = heartbeatIntervalSeconds
        self.deadPeerIntervals = deadPeerIntervals
        self.remoteCheckpointEveryBatches = remoteCheckpointEveryBatches
        self.peerHorizonKey = peerHorizonKey
        self.conflictPolicy = conflictPolicy
    }
}

extension ReplicationFilter {
    /// The filter as it travels in `subscribe`; nil for a predicate, which cannot travel and is
    /// applied on arrival instead.
    var wireFilter: ChangesFilter? {
        switch self {
        case .all: return ChangesFilter.none
        case .documentIDs(let ids): return .docIDs(ids.sorted())
        case .idPrefix(let prefix): return .idPrefix(prefix)
        case .predicate: return nil
        }
    }

    /// The filter a subscriber sent.
    init(wire: ChangesFilter) {
        switch wire {
        case .none: self = .all
        case .docIDs(let ids): self = .documentIDs(ids)
        case .idPrefix(let prefix): self = .idPrefix(prefix)
        }
    }
}
