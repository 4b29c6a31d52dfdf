import CanopyCore
import CanopyWire

/// What a peer may do to this node's copy of a database. Replication is driven by the receiver,
/// so `read` is this node serving the peer's subscriptions (pushing to it) and `write` is this
/// node subscribing to the peer and storing what it sends (pulling from it).
public enum ShareAccess: String, Sendable, Equatable, CaseIterable {
    /// It may pull from this node.
    case read
    /// It may push into this node.
    case write
    /// Both.
    case readWrite = "read-write"
    /// Nothing: the database is not shared with it (written for `default`, which every peer
    /// otherwise shares in its `direction`).
    case none

    /// The access a peer's `direction` gives it to `default`.
    public init(_ direction: ReplicationDirection) {
        switch direction {
        case .push: self = .read
        case .pull: self = .write
        case .both: self = .readWrite
        }
    }

    /// The direction this node replicates in with a peer that has this access; nil for `none`.
    public var direction: ReplicationDirection? {
        switch self {
        case .read: .push
        case .write: .pull
        case .readWrite: .both
        case .none: nil
        }
    }

    /// The peer may read this node's copy: this node sends it documents.
    public var peerReads: Bool { self == .read || self == .readWrite }
    /// The peer may write this node's copy: this node stores what it sends.
    public var peerWrites: Bool { self == .write || self == .readWrite }
}

/// One grant, a `[share DB NODE-ID]` section: the peer `nodeID` may do `access` to this node's
/// copy of `database`, for the documents whose id starts with `prefix` (all when nil).
public struct Share: Sendable, Equatable, CustomStringConvertible {
    /// The database shared.
    public var database: DatabaseName
    /// The peer it is shared with, in canonical text form.
    public var nodeID: String
    /// What the peer may do.
    public var access: ShareAccess
    /// Only ids starting with this; nil for every document.
    public var prefix: String?

    /// Creates a share.
    public init(database: DatabaseName, nodeID: String, access: ShareAccess, prefix: String? = nil) {
        self.database = database
        self.nodeID = nodeID
        self.access = access
        self.prefix = prefix
    }

    /// Whether the share covers `documentID`.
    public func covers(_ documentID: String) -> Bool { prefix.map(documentID.hasPrefix) ?? true }

    /// `read-write`, and the prefix when there is one (`read a-`).
    public var description: String { access.rawValue + (prefix.map { " " + $0 } ?? "") }
}

/// A database and a peer: what a share, a config file's `[share]` section or a pending offer is
/// about.
public struct ShareKey: Hashable, Sendable {
    public var database: DatabaseName
    public var nodeID: String

    public init(_ database: DatabaseName, _ nodeID: String) {
        self.database = database
        self.nodeID = nodeID
    }
}

/// The rights model: what this node lets each peer do to each of its databases, and what
/// follows from it — whether a peer's channel for a database is accepted, which way the two
/// replicate it and with which filters, which documents may be sent to the peer and which taken
/// from it. Pure: the agent builds one from its config (`AgentConfig.sharing`) and the simulator
/// one per simulated node, and both run their replication from it.
///
/// A database is shared with a peer when a share names the two, or, for `default` only, when the
/// peer is configured and no share says otherwise: then its `direction` gives the access
/// (`ShareAccess.init(_:)`). A share whose access is `none` shares nothing.
public struct Sharing: Sendable, Equatable {
    /// The `[share]` sections.
    public let shares: [Share]
    /// Each configured peer's `direction` (its access to `default` when no share names it).
    public let defaultDirections: [String: ReplicationDirection]

    /// The rights `shares` and the peers' default directions give.
    public init(shares: [Share], defaultDirections: [String: ReplicationDirection]) {
        self.shares = shares
        self.defaultDirections = defaultDirections
    }

    /// What `nodeID` may do to `database`, or nil when it is not shared with it.
    public func share(of database: DatabaseName, with nodeID: String) -> Share? {
        if let share = shares.first(where: { $0.database == database && $0.nodeID == nodeID }) {
            return share.access == .none ? nil : share
        }
        guard database == .default, let direction = defaultDirections[nodeID] else { return nil }
        return Share(database: .default, nodeID: nodeID, access: ShareAccess(direction))
    }

    /// The databases of `databases` shared with `nodeID`, in that order.
    public func shares(with nodeID: String, among databases: [DatabaseName]) -> [Share] {
        databases.compactMap { share(of: $0, with: nodeID) }
    }

    /// Whether this node may send `documentID` of `database` to `nodeID` (it reads this copy).
    public func maySend(_ documentID: String, of database: DatabaseName, to nodeID: String) -> Bool {
        guard let share = share(of: database, with: nodeID) else { return false }
        return share.access.peerReads && share.covers(documentID)
    }

    /// Whether this node may store `documentID` of `database` that `nodeID` sent (it writes this copy).
    public func mayAccept(_ documentID: String, of database: DatabaseName, from nodeID: String) -> Bool {
        guard let share = share(of: database, with: nodeID) else { return false }
        return share.access.peerWrites && share.covers(documentID)
    }

    /// How this node replicates `share.database` with the peer: the share's direction, and the
    /// filter `scope` (the share's prefix, or what narrows it further) both ways: this node serves
    /// the peer only those documents (deletions included) and stores only those the peer sends.
    /// The pull filter is part of the replication's id, so it is set whichever way the share
    /// runs. Nil when the share gives no direction.
    public static func replication(
        of share: Share, scope: ReplicationFilter, _ base: ReplicationConfiguration
    ) -> ReplicationConfiguration? {
        guard let direction = share.access.direction else { return nil }
        var configuration = base
        configuration.direction = direction
        configuration.pullFilter = scope
        configuration.pushFilter = scope
        return configuration
    }

    /// The filter of a share: its prefix, or every document.
    public static func scope(of share: Share) -> ReplicationFilter {
        share.prefix.map(ReplicationFilter.idPrefix) ?? .all
    }

    /// What a peer that attaches a database this node does not share with it is told, and the
    /// channel refused (protocol v2's `forbidden`).
    public static func refusal(of database: DatabaseName) -> (code: ErrorCode, message: String) {
        (.forbidden, "database \(database) is not shared with you")
    }
}

/// Databases peers asked to replicate that are not shared with them (Syncthing's pending
/// folders): an offer is a database and the peer that asked, kept until the database is shared
/// with the peer or the peer removed. A dismissed offer is not listed, and the peer's further
/// requests for it are recorded quietly. At most `capacity` offers are kept (dismissed ones
/// included): the one seen least recently makes room. Pure: time is passed in.
public struct PendingOffers: Sendable, Equatable {
    /// An offer: the database and the peer that asked for it.
    public typealias Key = ShareKey

    /// What is known of an offer.
    public struct Offer: Sendable, Equatable {
        public var attempts: Int
        public var firstSeen: Double
        public var lastSeen: Double
        /// The operator dismissed it: not listed, and its requests are refused quietly.
        public var dismissed = false

        public init(attempts: Int, firstSeen: Double, lastSeen: Double, dismissed: Bool = false) {
            self.attempts = attempts
            self.firstSeen = firstSeen
            self.lastSeen = lastSeen
            self.dismissed = dismissed
        }
    }

    /// What `record` found.
    public enum Recorded: Equatable, Sendable {
        /// A new offer (worth telling the operator of).
        case new
        /// Another request for an offer already listed.
        case again
        /// Another request for a dismissed offer.
        case dismissed
    }

    /// The most offers kept.
    public let capacity: Int
    /// Every offer, dismissed ones included.
    public private(set) var offers: [Key: Offer]

    /// `offers` (a loaded list), at most `capacity` of them.
    public init(capacity: Int, offers: [Key: Offer] = [:]) {
        precondition(capacity > 0, "room for at least one offer")
        self.capacity = capacity
        self.offers = offers
    }

    /// Records a request for a database not shared with the peer.
    public mutating func record(_ key: Key, at time: Double) -> Recorded {
        if var offer = offers[key] {
            offer.attempts += 1
            offer.lastSeen = time
            offers[key] = offer
            return offer.dismissed ? .dismissed : .again
        }
        if offers.count >= capacity, let oldest = offers.min(by: { ($0.value.lastSeen, $0.key.nodeID) < ($1.value.lastSeen, $1.key.nodeID) })?.key {
            offers[oldest] = nil
        }
        offers[key] = Offer(attempts: 1, firstSeen: time, lastSeen: time)
        return .new
    }

    /// Marks a listed offer dismissed; true when there was one (a dismissed offer is not listed).
    public mutating func dismiss(_ key: Key) -> Bool {
        guard var offer = offers[key], !offer.dismissed else { return false }
        offer.dismissed = true
        offers[key] = offer
        return true
    }

    /// Forgets an offer, dismissed or not (it was shared); true when there was one.
    @discardableResult
    public mutating func remove(_ key: Key) -> Bool { offers.removeValue(forKey: key) != nil }

    /// Forgets every offer of a peer (it was removed); true when there was one.
    @discardableResult
    public mutating func removeAll(from nodeID: String) -> Bool {
        let before = offers.count
        offers = offers.filter { $0.key.nodeID != nodeID }
        return offers.count != before
    }

    /// Every offer, dismissed ones included, by database then node id.
    public var sorted: [(key: Key, value: Offer)] {
        offers.sorted { ($0.key.database, $0.key.nodeID) < ($1.key.database, $1.key.nodeID) }
    }

    /// Every offer not dismissed, by database then node id.
    public var listed: [(key: Key, value: Offer)] { sorted.filter { !$0.value.dismissed } }
}
