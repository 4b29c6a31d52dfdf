import CanopyWire

/// What a multiplexed connection delivers to its `ChannelMux`.
package enum ConnectionEvent: Sendable {
    /// A complete, decoded message of protocol version 2.
    case message(ConnectionMessage)
    /// Bytes that broke the framing or did not decode: the mux closes the connection with `close`
    /// carrying the error's code, and nothing after it is delivered.
    case violation(ProtocolError)
    /// The connection closed; no more events follow.
    case closed(TransportCloseReason)
}

/// A connection to one peer that speaks protocol version 2 (`Protocol/replication-v2.md`): the
/// encrypted TCP channel in the agent, an in-memory pipe in tests. `MessageTransport`'s contract
/// holds: `send` queues and never blocks, and every event is delivered on the mux's serial
/// context, in the order the peer sent it.
package protocol ConnectionTransport: AnyObject, Sendable {
    /// Installs the event handler and starts delivering. Called once.
    func start(_ handler: @escaping @Sendable (ConnectionEvent) -> Void)
    /// Queues a message for the peer.
    func send(_ message: ConnectionMessage)
    /// Closes the connection: sends what it can, then delivers `.closed`.
    func close(_ reason: TransportCloseReason)
}
