import CanopyReplication

/// With which node a `Replicator` replicates, how, and where to reach it. Shaped after Couchbase
/// Lite's `ReplicatorConfiguration`; it becomes the peer's entry in the node's config file, as
/// `canopyctl peer add` writes it.
///
/// Replication between two nodes needs each to allow the other: both create a replicator with
/// the other's id. At least one of them gives an `address` to dial; the other may accept only.
public struct ReplicatorConfiguration: Sendable, Equatable {
    /// The other node's id (its `Node.nodeID`; case, dashes and spaces are ignored).
    public var peer: String
    /// Where to dial the peer, `HOST:PORT` (its `Node.listenAddress`); nil: never dial, accept
    /// the peer's connections only.
    public var address: String?
    /// Which way documents flow: `.push` sends this node's changes, `.pull` takes the peer's,
    /// `.both` does both.
    public var direction: ReplicationDirection
    /// True: stay connected and replicate new changes as they commit (the replicator goes idle
    /// when caught up). False: one pass, then stop (the replicator reports `.completed`); each
    /// `Replicator.sync()` runs another. The two nodes' modes are independent: a one-shot pass
    /// against a peer that replicates continuously completes too.
    public var continuous: Bool

    /// A configuration: both directions, continuous, unless told otherwise.
    public init(peer: String, address: String? = nil, direction: ReplicationDirection = .both, continuous: Bool = true) {
        self.peer = peer
        self.address = address
        self.direction = direction
        self.continuous = continuous
    }
}
