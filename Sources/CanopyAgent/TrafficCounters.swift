import Foundation

/// Bytes moved on the agent's peer TCP connections since it started, both directions, counted at
/// the socket (handshake, framing and encryption included): `stats` reports them so that
/// `canopy-bench replicate` can state the wire cost per revision.
///
/// Invariant: the totals only grow. Connections run on their own queues, so a lock guards them.
final class TrafficCounters: @unchecked Sendable {
    private let lock = NSLock()
    private var sent = 0
    private var received = 0

    /// Adds `count` bytes written to a peer.
    func addSent(_ count: Int) { lock.withLock { sent += count } }

    /// Adds `count` bytes read from a peer.
    func addReceived(_ count: Int) { lock.withLock { received += count } }

    /// The totals so far.
    var totals: (sent: Int, received: Int) { lock.withLock { (sent, received) } }
}
