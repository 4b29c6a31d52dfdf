import CanopyStore
import CanopyWire

/// Errors of the replication engine, in STYLE's three kinds: a peer's protocol violation closes
/// that connection; an operating error (store, transport) is reported and retried; programmer
/// errors are preconditions, not cases here.
public enum ReplicationError: Error, Sendable, CustomStringConvertible {
    /// The peer broke the protocol; the connection is closed and the peer reported.
    case protocolViolation(String)
    /// The peer refused our data or our subscription.
    case peerRejected(String)
    /// The local store failed (disk full, corruption); the replication stops and retries later.
    case store(StoreError)
    /// The connection was lost.
    case disconnected(String)

    public var description: String {
        switch self {
        case .protocolViolation(let detail): return "protocol violation: \(detail)"
        case .peerRejected(let detail): return "rejected by peer: \(detail)"
        case .store(let error): return "store error: \(error)"
        case .disconnected(let detail): return "disconnected: \(detail)"
        }
    }
}
