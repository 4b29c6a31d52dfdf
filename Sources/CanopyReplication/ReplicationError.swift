import CanopyStore
import CanopyWire

/// Errors of the replication engine, in the three kinds of `Protocol/design.md` §9.3: a peer's protocol violation closes
/// that connection; an operating error (store, transport) is reported and retried; programmer
/// errors are preconditions, not cases here.
public enum ReplicationError: Error, Sendable, CustomStringConvertible {
    /// The peer broke the protocol; the connection is closed with the error's code and the peer
    /// reported.
    case protocolViolation(ProtocolError)
    /// The peer sent a document that failed the store's checks (a revision id that is not the
    /// hash of its content, a body that is not a canonical JSON object): a protocol violation that
    /// is also reported as a `rejected` event for the document.
    case rejectedDocument(documentID: String?, detail: String)
    /// The peer refused our data or our subscription.
    case peerRejected(String)
    /// The local store failed (disk full, corruption); the replication stops and retries later.
    case store(StoreError)
    /// The connection was lost.
    case disconnected(String)
    /// The peer refused the channel for this database (`forbidden` or `notFound`): it does not
    /// replicate the database with this node. A sync does not wait for it; the replicator asks
    /// again with its backoff, so a share made on the peer later is picked up.
    case notShared(String)

    /// A violation naming a request, entry or revision that does not exist.
    static func invalidReference(_ detail: String) -> ReplicationError {
        .protocolViolation(.invalidReference(detail: detail))
    }

    public var description: String {
        switch self {
        case .protocolViolation(let error): return "protocol violation: \(error)"
        case .rejectedDocument(let id, let detail): return "rejected document \(id ?? "?"): \(detail)"
        case .peerRejected(let detail): return "rejected by peer: \(detail)"
        case .store(let error): return "store error: \(error)"
        case .disconnected(let detail): return "disconnected: \(detail)"
        case .notShared(let detail): return "not shared by the peer: \(detail)"
        }
    }
}
