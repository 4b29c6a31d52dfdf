/// What a handshake state machine asks its caller to do (`Protocol/design.md` §9.1: the shell performs it).
public enum HandshakeAction: Sendable {
    /// Write these bytes to the connection.
    case send([UInt8])
    /// The peer is authenticated and authorised; build a `SecureChannel` from the session.
    case established(EstablishedSession)
    /// Close the connection without sending anything more. The state machine is now failed.
    case fail(CryptoError)
}

/// Which end of the TCP connection a node is.
public enum HandshakeRole: Sendable, Equatable {
    /// The side that dialled and sent Msg1.
    case initiator
    /// The side that accepted the connection.
    case responder
}

/// The result of a completed handshake: who the peer is and the keys of the two streams.
public struct EstablishedSession: Sendable {
    /// This node's role on the connection.
    public let role: HandshakeRole
    /// The authenticated, authorised peer.
    public let peer: NodeID
    /// The final transcript hash: identical on both ends and unique to the connection, so it can
    /// serve as a connection id or channel binding (e.g. in `SimultaneousConnect`).
    public let transcriptHash: [UInt8]
    /// Bytes that arrived after the last handshake message: the start of the peer's stream.
    /// `SecureChannel` takes them over.
    public let leftover: [UInt8]
    /// Key of the stream this node sends on.
    let sendKey: [UInt8]
    /// Key of the stream this node receives on.
    let receiveKey: [UInt8]
}

/// The knobs and collaborators both handshake roles share.
public struct HandshakeConfiguration: Sendable {
    /// This node's long-term identity.
    public var identity: Identity
    /// Decides whether an authenticated peer may connect.
    public var authorizer: any Authorizer
    /// Where refused peers are reported for an operator; nil to report nowhere.
    public var pendingPeers: PendingPeers?
    /// The peer's address as the shell knows it, for the pending record and logs.
    public var remoteAddress: String
    /// The replication group's network key (`NetworkKey.open` unless configured).
    public var networkKey: NetworkKey
    /// Feature flags the initiator offers in Msg1. Version 1 defines none; they are still bound
    /// into the transcript so a later version can add some without a downgrade hole.
    public var flags: UInt16

    public init(
        identity: Identity, authorizer: any Authorizer, pendingPeers: PendingPeers?,
        remoteAddress: String, networkKey: NetworkKey = .open, flags: UInt16 = 0
    ) {
        self.identity = identity
        self.authorizer = authorizer
        self.pendingPeers = pendingPeers
        self.remoteAddress = remoteAddress
        self.networkKey = networkKey
        self.flags = flags
    }

    /// Applies the authorisation rule once the peer has proved its identity; reports a refused
    /// peer as pending. Returns the failure to report, or nil to proceed.
    func authorize(_ peer: NodeID, now: Duration) -> CryptoError? {
        if peer == identity.nodeID { return .handshakeSelfConnection }
        if authorizer.isAllowed(peer) { return nil }
        pendingPeers?.record(peer, address: remoteAddress, at: now)
        return .peerNotAuthorized(peer)
    }
}
