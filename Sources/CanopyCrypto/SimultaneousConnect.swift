/// When two nodes dial each other at the same time they end up with two connections; exactly one
/// must survive, and both nodes must pick the same one without talking about it.
///
/// Rule (Protocol/replication-v1.md §4.7): keep the connection whose **initiator has the larger
/// node id** (byte-wise order of the public keys). If both connections have the same initiator
/// (a redial while the old connection is still up), keep the one with the smaller transcript hash,
/// which both ends know and no one can choose. The rule is a pure function of values both ends
/// share, so it never flaps.
public enum SimultaneousConnect {
    /// What both ends know about an established connection.
    public struct Connection: Sendable, Equatable {
        public let initiator: NodeID
        public let responder: NodeID
        /// `EstablishedSession.transcriptHash`.
        public let transcriptHash: [UInt8]

        public init(initiator: NodeID, responder: NodeID, transcriptHash: [UInt8]) {
            self.initiator = initiator
            self.responder = responder
            self.transcriptHash = transcriptHash
        }
    }

    /// Which of two connections between the same pair of nodes to keep.
    public enum Choice: Sendable, Equatable {
        case first
        case second
    }

    /// Picks the connection to keep; the other one is closed.
    /// Precondition: both connect the same two nodes.
    public static func keep(_ first: Connection, _ second: Connection) -> Choice {
        precondition(
            Set([first.initiator, first.responder]) == Set([second.initiator, second.responder]),
            "simultaneous-connect resolution compares connections between the same two nodes")
        if first.initiator != second.initiator {
            return first.initiator > second.initiator ? .first : .second
        }
        return first.transcriptHash.lexicographicallyPrecedes(second.transcriptHash) ? .first : .second
    }

    /// Whether this node should keep dialling `remote` while an inbound connection from it is
    /// up: only if its own outbound connection would win.
    public static func outboundWins(local: NodeID, remote: NodeID) -> Bool {
        local > remote
    }
}

extension SimultaneousConnect {
    /// The rule as a node applies it to each peer: the connection its session with the peer runs
    /// on, and for each new connection, outbound or inbound, whether to take it. The agent and
    /// the simulator both keep one. Pure.
    public struct Adoption: Sendable, Equatable {
        private var current: [String: Connection] = [:]

        /// No connection yet.
        public init() {}

        /// A connection with `peer` completed its handshake. True: take it (the session starts
        /// on it, or moves to it from the one it replaces), and it is now the peer's; false: the
        /// connection the open session runs on wins, and the new one is closed. `sessionOpen`
        /// says whether a session with the peer runs now: without one, any new connection is
        /// taken.
        public mutating func admit(_ connection: Connection, from peer: String, sessionOpen: Bool) -> Bool {
            if sessionOpen, let open = current[peer], SimultaneousConnect.keep(open, connection) == .first { return false }
            current[peer] = connection
            return true
        }

        /// The connection the peer's session last took, if any.
        public func connection(of peer: String) -> Connection? { current[peer] }

        /// Forgets the peer (it was removed, or the node restarted).
        public mutating func forget(_ peer: String) { current[peer] = nil }
    }
}
