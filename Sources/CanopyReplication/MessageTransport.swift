import CanopyWire

/// Why a transport closed.
public enum TransportCloseReason: Sendable, Equatable {
    /// The peer closed cleanly (a `close` message or the secure channel's FINAL tag).
    case peerClosed
    /// This side closed (graceful shutdown).
    case localClosed
    /// The connection failed: reset, EOF without FINAL, decryption failure, dead peer.
    case failed(String)
    /// The peer violated the protocol; the connection was closed with this error.
    case protocolViolation(String)
}

/// What a transport delivers to its session.
public enum TransportEvent: Sendable {
    /// A complete, decoded message.
    case message(Message)
    /// The transport closed; no more events follow.
    case closed(TransportCloseReason)
}

/// A message-oriented connection to one peer: the encrypted TCP channel in the agent, an
/// in-memory pipe in tests, the simulated network in the simulator. The replication engine sees
/// only this protocol.
///
/// Transports never block: `send` queues. Every event is delivered on the session's serial
/// context (the scheduler the session was created with), in the order the peer sent them.
public protocol MessageTransport: AnyObject, Sendable {
    /// Installs the event handler and starts delivering. Called once.
    func start(_ handler: @escaping @Sendable (TransportEvent) -> Void)
    /// Queues a message for the peer.
    func send(_ message: Message)
    /// Closes the connection. `reason` is `.localClosed` for a graceful close; a transport sends
    /// what it can (a `close` message, the FINAL tag) and then delivers `.closed`.
    func close(_ reason: TransportCloseReason)
}
