import CanopyCore

// MARK: One-shot sync and the event stream

extension Admin {
    /// `sync {node_id, wait?}`: a one-shot replication with a configured peer, every database
    /// shared with it. Without `wait` the reply says it started; with it, the reply comes when
    /// both directions have caught up (progress goes out as `sync.progress` events).
    public struct Sync: AdminCommand {
        public static let name = "sync"
        public var nodeID: String
        public var wait: Bool?

        public init(nodeID: String, wait: Bool) {
            self.nodeID = nodeID
            self.wait = wait
        }

        /// Started (without `wait`), or finished.
        public enum Reply: Codable, Sendable, Equatable {
            case started(Started)
            case finished(SyncOutcome)

            /// `{node_id, started: true}`.
            public struct Started: Codable, Sendable, Equatable {
                public var nodeID: String
                public var started: Bool

                public init(nodeID: String) {
                    self.nodeID = nodeID
                    self.started = true
                }
            }

            private enum Key: String, CodingKey { case started }

            public init(from decoder: any Decoder) throws {
                let container = try decoder.container(keyedBy: Key.self)
                let value = try decoder.singleValueContainer()
                self = container.contains(.started) ? .started(try value.decode(Started.self)) : .finished(try value.decode(SyncOutcome.self))
            }

            public func encode(to encoder: any Encoder) throws {
                var container = encoder.singleValueContainer()
                switch self {
                case .started(let started): try container.encode(started)
                case .finished(let outcome): try container.encode(outcome)
                }
            }
        }
    }

    /// What a finished sync moved, as the `sync` reply and the `sync.finished` event carry it.
    public struct SyncOutcome: Codable, Sendable, Equatable, AdminExplicitNulls {
        public var nodeID: String
        /// Changes checked, both directions.
        public var completed: Int64
        /// Documents the peer sent that this node refused, and the last reason.
        public var rejected: Int64
        public var lastRejection: String?
        /// Documents received from the peer and sent to it.
        public var received: Int64
        public var sent: Int64
        /// Documents this node pushed that the peer refused, and its last reason.
        public var refusedByPeer: Int64
        public var lastRefusedByPeer: String?
        /// Databases this node shares with the peer that the peer does not share back.
        public var notSharedByPeer: [NotShared]
        /// Databases whose writes from this node the peer takes none or part of.
        public var peerTakesPart: [PeerTakes]

        public init(
            nodeID: String, completed: Int64, rejected: Int64, lastRejection: String?, received: Int64, sent: Int64, refusedByPeer: Int64,
            lastRefusedByPeer: String?, notSharedByPeer: [NotShared], peerTakesPart: [PeerTakes]
        ) {
            self.nodeID = nodeID
            self.completed = completed
            self.rejected = rejected
            self.lastRejection = lastRejection
            self.received = received
            self.sent = sent
            self.refusedByPeer = refusedByPeer
            self.lastRefusedByPeer = lastRefusedByPeer
            self.notSharedByPeer = notSharedByPeer
            self.peerTakesPart = peerTakesPart
        }

        /// A database the peer does not share back, and what it said.
        public struct NotShared: Codable, Sendable, Equatable {
            public var db: String
            public var reason: String

            public init(db: String, reason: String) {
                self.db = db
                self.reason = reason
            }
        }

        /// A database whose writes the peer takes only part of: what it takes.
        public struct PeerTakes: Codable, Sendable, Equatable {
            public var db: String
            public var peerTakes: String

            public init(db: String, peerTakes: String) {
                self.db = db
                self.peerTakes = peerTakes
            }
        }
    }

    /// `events {since?}`: subscribes the connection to the event stream. The reply comes first,
    /// then the events held after `since` (default: none), then each new event, one line each
    /// (`{"event": {seq, type, time, data}}`).
    public struct Subscribe: AdminCommand {
        public static let name = "events"
        public var since: Int64?

        public init(since: Int64? = nil) { self.since = since }

        public func validate() throws(AdminFailure) {
            try check("since", since, in: 0...Int64.max)
        }

        public struct Reply: Codable, Sendable, Equatable {
            /// The sequence of the newest event so far.
            public var lastSeq: Int64
            /// Events after `since` the agent no longer holds.
            public var missed: Int64

            public init(lastSeq: Int64, missed: Int64) {
                self.lastSeq = lastSeq
                self.missed = missed
            }
        }
    }
}

// MARK: Events

extension Admin {
    /// One event of the stream (Protocol/admin-v1.md §5): its number (1 for the first since the
    /// agent started, then one more per event), its type, when (seconds since 1970) and its
    /// members as the protocol lists them for its type.
    public struct Event: Codable, Sendable, Equatable {
        public var seq: Int64
        public var type: String
        public var time: Double
        public var data: JSONValue

        public init(seq: Int64, type: String, time: Double, data: JSONValue) {
            self.seq = seq
            self.type = type
            self.time = time
            self.data = data
        }

        /// The event's JSON value (`time` always a number with a fraction, as the agent writes it).
        public var json: JSONValue {
            .object(["seq": .int(seq), "type": .string(type), "time": .double(time), "data": data])
        }
    }

    /// A line of a subscribed connection that carries an event: `{"event": {…}}`.
    public struct EventLine: Codable, Sendable, Equatable {
        public var event: Event

        public init(event: Event) { self.event = event }

        /// The line's JSON value.
        public var json: JSONValue {
            .object(["event": event.json])
        }
    }
}

extension Admin {
    /// `sync.progress`'s data: changes checked so far in a one-shot sync with the peer, and how
    /// many are known so far (a sync's total is not known up front).
    public struct SyncProgress: Codable, Sendable, Equatable {
        public var nodeID: String
        public var completed: Int64
        public var total: Int64

        public init(nodeID: String, completed: Int64, total: Int64) {
            self.nodeID = nodeID
            self.completed = completed
            self.total = total
        }
    }
}
