import CanopyCore
import CanopyReplication

/// With which node a `Replicator` replicates, how, and where to reach it. Shaped after Couchbase
/// Lite's `ReplicatorConfiguration`; it becomes the peer's entry in the node's config file, as
/// `canopyctl peer add` writes it.
///
/// Replication between two nodes needs each to allow the other: both create a replicator with
/// the other's id. At least one of them gives an `address` to dial; the other may accept only.
///
/// `documentIDs` and `conflictResolution` live only as long as the node: the config file keeps
/// the peer, not them. A node restarted without the application's replicator replicates every
/// shared document and settles conflicts by its databases' rules.
public struct ReplicatorConfiguration: Sendable {
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
    /// Only these documents replicate, both ways (Couchbase Lite's `documentIDs`), within what
    /// each database's share allows; nil: every shared document. 1 to 10,000 ids of 1 to 1,024
    /// UTF-8 bytes each. The filter is part of the replication's identity: changing it starts
    /// the changes feed again from the start (documents already held are not sent again).
    public var documentIDs: [String]?
    /// How this replicator settles the conflicts that the peer's revisions create, as they
    /// arrive, in the same transaction (Couchbase Lite's `conflictResolver`): `.custom` with an
    /// application resolver (keep the local revision, keep the remote one, a merged body, or
    /// delete), `.rules`, `.automatic` or `.manual`. Nil: the database's own rules. When the
    /// replicator starts, the policy is also offered every conflict the database keeps, so one a
    /// resolver threw on is retried then.
    public var conflictResolution: ConflictPolicy?

    /// A configuration: both directions, continuous, every shared document, the database's
    /// conflict rules, unless told otherwise.
    public init(
        peer: String, address: String? = nil, direction: ReplicationDirection = .both, continuous: Bool = true,
        documentIDs: [String]? = nil, conflictResolution: ConflictPolicy? = nil
    ) {
        self.peer = peer
        self.address = address
        self.direction = direction
        self.continuous = continuous
        self.documentIDs = documentIDs
        self.conflictResolution = conflictResolution
    }
}
