import Foundation
import CanopyWire

/// Decides which authenticated peers may connect (`Protocol/design.md` §5.2: an allow-list of node ids).
/// Called only after the peer has proved it holds its key, never on an unauthenticated claim.
public protocol Authorizer: Sendable {
    /// Whether `peer` may replicate with this node.
    func isAllowed(_ peer: NodeID) -> Bool
}

/// A fixed set of allowed node ids.
public struct AllowList: Authorizer {
    /// The allowed ids.
    public let allowed: Set<NodeID>

    public init(_ allowed: some Sequence<NodeID>) {
        self.allowed = Set(allowed)
    }

    public func isAllowed(_ peer: NodeID) -> Bool { allowed.contains(peer) }
}

/// An authenticated peer that was refused because its node id is not allowed, kept so an
/// operator can see it and accept it (Syncthing's "pending device").
public struct PendingPeer: Sendable, Equatable {
    /// The peer's proven node id.
    public let nodeID: NodeID
    /// The address of its most recent attempt, as the shell reported it.
    public var address: String
    /// The caller's clock at its first refused attempt.
    public let firstSeen: Duration
    /// The caller's clock at its most recent refused attempt.
    public var lastSeen: Duration
    /// How many times it has been refused.
    public var attempts: Int
}

/// The pending-peer record: thread-safe, bounded, ordered for display.
///
/// At most `WireLimits.pendingPeersMax` entries are kept; when full, the entry seen least recently is
/// dropped, so a flood of fresh identities cannot grow memory without limit.
public final class PendingPeers: @unchecked Sendable {
    /// Most pending peers remembered at once.
    public static let peersMax = 256

    private let lock = NSLock()
    private var entries: [NodeID: PendingPeer] = [:]

    public init() {}

    /// Records a refused attempt by `peer` from `address` at `now`.
    public func record(_ peer: NodeID, address: String, at now: Duration) {
        lock.withLock {
            if var entry = entries[peer] {
                entry.address = address
                entry.lastSeen = now
                entry.attempts += 1
                entries[peer] = entry
                return
            }
            if entries.count >= WireLimits.pendingPeersMax, let stalest = Self.stalest(in: entries) {
                entries[stalest] = nil
            }
            entries[peer] = PendingPeer(nodeID: peer, address: address, firstSeen: now, lastSeen: now, attempts: 1)
        }
    }

    /// Forgets `peer` (the operator accepted or dismissed it). Returns its record, if any.
    @discardableResult
    public func remove(_ peer: NodeID) -> PendingPeer? {
        lock.withLock { entries.removeValue(forKey: peer) }
    }

    /// All pending peers, ordered by node id so every listing is stable.
    public var all: [PendingPeer] {
        lock.withLock { entries.values.sorted { $0.nodeID < $1.nodeID } }
    }

    /// The least recently seen entry; ties go to the smaller node id so eviction is deterministic.
    private static func stalest(in entries: [NodeID: PendingPeer]) -> NodeID? {
        entries.values.min { ($0.lastSeen, $0.nodeID) < ($1.lastSeen, $1.nodeID) }?.nodeID
    }
}
