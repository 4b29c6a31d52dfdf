import CanopyCore
import CanopyReplication

/// The data of one kind of event (Protocol/admin-v1.md §5): its members are the event's `data`,
/// `eventType` its `type`. The agent emits only values of these types; a client reads an event's
/// data as the type its `type` names (`Admin.Event.data(as:)`).
public protocol AdminEventData: Codable, Sendable {
    /// The event's `type`.
    static var eventType: String { get }
}

extension Admin {
    /// The data of every event about one document: `document.changed`, `document.pushed`,
    /// `document.rejected`, `push.refused`, `document.damaged`, `conflict.detected`,
    /// `conflict.resolved`, `conflict.waiting` and `resolution.failed`. Which members are present
    /// depends on the kind, as §5 lists them; `kind` is the event's `type`, not a member.
    public struct DocumentEvent: Codable, Sendable, Equatable {
        /// The event types about one document.
        public enum Kind: String, Sendable, CaseIterable {
            case changed = "document.changed"
            case pushed = "document.pushed"
            case rejected = "document.rejected"
            case pushRefused = "push.refused"
            case damaged = "document.damaged"
            case conflictDetected = "conflict.detected"
            case conflictResolved = "conflict.resolved"
            case conflictWaiting = "conflict.waiting"
            case resolutionFailed = "resolution.failed"
        }

        /// Where a `document.changed` came from.
        public enum Origin: String, Codable, Sendable, CaseIterable, AdminChoice {
            /// An admin `put`, `delete`, `bulk_docs` or `attach` on this node.
            case local
            /// Revisions written from the peer `node_id`.
            case peer
        }

        /// The event's type.
        public var kind: Kind = .changed
        /// The database the document is in.
        public var db: String
        public var doc: String
        public var rev: RevisionID?
        /// Present and true for a deletion (`document.changed`).
        public var deleted: Bool?
        public var origin: Origin?
        /// The peer whose revisions caused it, when one did.
        public var nodeID: String?
        /// `conflict.detected`: the conflicting open leaves, current first.
        public var leaves: [RevisionID]?
        /// `conflict.detected`: the rule that covers the document, `conflicts` for the catch-all.
        public var rule: String?
        /// `conflict.detected`: how the conflict is settled, as the config names it.
        public var strategy: String?
        /// `conflict.resolved`: who settled it.
        public var by: String?
        /// `conflict.waiting`, `resolution.failed`: the resolver it is kept for or that failed.
        public var resolver: String?
        /// Why (`document.rejected`, `push.refused`, `document.damaged`, `resolution.failed`).
        public var reason: String?
        /// `document.pushed`: what the peer said.
        public var detail: String?

        private enum CodingKeys: String, CodingKey {
            case db, doc, rev, deleted, origin, nodeID, leaves, rule, strategy, by, resolver, reason, detail
        }

        /// Creates an event's data.
        public init(
            _ kind: Kind, db: String, doc: String, rev: RevisionID? = nil, deleted: Bool = false, origin: Origin? = nil,
            nodeID: String? = nil, by: String? = nil, resolver: String? = nil, reason: String? = nil
        ) {
            self.kind = kind
            self.db = db
            self.doc = doc
            self.rev = rev
            self.deleted = deleted ? true : nil
            self.origin = origin
            self.nodeID = nodeID
            self.by = by
            self.resolver = resolver
            self.reason = reason
        }

        /// A write through the admin socket: `document.changed` with origin `local`.
        public static func localChange(db: String, doc: String, rev: RevisionID, deleted: Bool = false) -> DocumentEvent {
            DocumentEvent(.changed, db: db, doc: doc, rev: rev, deleted: deleted, origin: .local)
        }

        /// A replication engine's event about the document, concerning the peer `nodeID` (empty:
        /// an import's or a conflict scan's, which come from no peer), in `database`.
        public init(_ event: CanopyReplication.DocumentEvent, nodeID: String, database: DatabaseName) {
            self.init(Self.kinds[event.kind]!, db: database.text, doc: event.documentID, rev: event.revision)
            if !nodeID.isEmpty { self.nodeID = nodeID }
            switch event.kind {
            case .pulled:
                origin = .peer
                deleted = event.deleted ? true : nil
            case .conflictDetected:
                leaves = event.conflict?.leaves ?? []
                rule = event.conflict?.rule ?? "conflicts"
                strategy = event.conflict?.strategy.description ?? "automatic"
            case .conflictResolved:
                by = event.detail ?? "automatic"
            case .conflictAwaitingResolver:
                resolver = event.detail ?? ""
            case .resolutionFailed:
                reason = event.detail ?? ""
                resolver = event.resolver
            case .rejected, .refusedByPeer:
                reason = event.detail ?? ""
            case .pushed:
                detail = event.detail
            }
        }

        /// The event type of each engine event kind, fixed by the admin protocol.
        private static let kinds: [DocumentEventKind: Kind] = [
            .pulled: .changed, .pushed: .pushed, .conflictDetected: .conflictDetected, .conflictResolved: .conflictResolved,
            .conflictAwaitingResolver: .conflictWaiting, .resolutionFailed: .resolutionFailed, .rejected: .rejected,
            .refusedByPeer: .pushRefused,
        ]
    }

    /// `agent.started`: the agent is serving.
    public struct AgentStarted: AdminEventData, Equatable {
        public static let eventType = "agent.started"
        public var nodeID: String
        /// The bound peer address, with its real port.
        public var listen: String

        public init(nodeID: String, listen: String) {
            self.nodeID = nodeID
            self.listen = listen
        }
    }

    /// `agent.stopping`: a shutdown began.
    public struct AgentStopping: AdminEventData, Equatable {
        public static let eventType = "agent.stopping"

        public init() {}
    }

    /// `config.reloaded`: the config file was read again and applied.
    public struct ConfigReloaded: AdminEventData, Equatable {
        public static let eventType = "config.reloaded"
        public var peers: Int64
        /// The changed settings that wait for a restart.
        public var restartRequired: [String]

        public init(peers: Int64, restartRequired: [String]) {
            self.peers = peers
            self.restartRequired = restartRequired
        }
    }

    /// `config.error`: the config file could not be applied; the running config is kept.
    public struct ConfigError: AdminEventData, Equatable {
        public static let eventType = "config.error"
        public var message: String

        public init(message: String) { self.message = message }
    }

    /// `config.changed`: an admin command edited the config file.
    public struct ConfigChanged: AdminEventData, Equatable {
        public static let eventType = "config.changed"
        /// The command that edited it (`peer.add`, `db.create`, `share`, …).
        public var command: String
        /// For a peer or share command.
        public var nodeID: String?
        /// For a database or share command.
        public var db: String?

        public init(command: String, nodeID: String? = nil, db: String? = nil) {
            self.command = command
            self.nodeID = nodeID
            self.db = db
        }
    }

    /// `db.created`.
    public struct DatabaseCreated: AdminEventData, Equatable {
        public static let eventType = "db.created"
        public var db: String

        public init(db: String) { self.db = db }
    }

    /// `db.deleted`, with how many documents it held.
    public struct DatabaseDeleted: AdminEventData, Equatable {
        public static let eventType = "db.deleted"
        public var db: String
        public var documents: Int64

        public init(db: String, documents: Int64) {
            self.db = db
            self.documents = documents
        }
    }

    /// `share.pending`: a peer asked to replicate a database not shared with it.
    public struct SharePending: AdminEventData, Equatable {
        public static let eventType = "share.pending"
        public var nodeID: String
        public var db: String

        public init(nodeID: String, db: String) {
            self.nodeID = nodeID
            self.db = db
        }
    }

    /// `import.finished`.
    public struct ImportFinished: AdminEventData, Equatable {
        public static let eventType = "import.finished"
        public var db: String
        public var documents: Int64
        public var revisionsAdded: Int64

        public init(db: String, documents: Int64, revisionsAdded: Int64) {
            self.db = db
            self.documents = documents
            self.revisionsAdded = revisionsAdded
        }
    }

    /// `resolver.disconnected`: a registered resolver's connection ended.
    public struct ResolverDisconnected: AdminEventData, Equatable {
        public static let eventType = "resolver.disconnected"
        public var name: String

        public init(name: String) { self.name = name }
    }

    /// `peer.pending`: a node that is no configured peer connected and was refused.
    public struct PeerPending: AdminEventData, Equatable {
        public static let eventType = "peer.pending"
        public var nodeID: String
        /// Where it connected from.
        public var address: String

        public init(nodeID: String, address: String) {
            self.nodeID = nodeID
            self.address = address
        }
    }

    /// `peer.connected`: a session with a configured peer started, whichever side dialled.
    public struct PeerConnected: AdminEventData, Equatable {
        public static let eventType = "peer.connected"
        public var nodeID: String

        public init(nodeID: String) { self.nodeID = nodeID }
    }

    /// `peer.disconnected`: the session ended, and why.
    public struct PeerDisconnected: AdminEventData, Equatable {
        public static let eventType = "peer.disconnected"
        public var nodeID: String
        public var reason: String

        public init(nodeID: String, reason: String) {
            self.nodeID = nodeID
            self.reason = reason
        }
    }

    /// `sync.failed`: a `sync` with `wait` ended in an error.
    public struct SyncFailed: AdminEventData, Equatable {
        public static let eventType = "sync.failed"
        public var nodeID: String
        public var code: String
        public var message: String

        public init(nodeID: String, code: String, message: String) {
            self.nodeID = nodeID
            self.code = code
            self.message = message
        }
    }
}

extension Admin.SyncProgress: AdminEventData {
    public static let eventType = "sync.progress"
}

/// `sync.finished`'s data is the `sync` reply's members.
extension Admin.SyncOutcome: AdminEventData {
    public static let eventType = "sync.finished"
}

extension Admin.Event {
    /// The event's data as `D`, or nil when the event is of another type or its data does not
    /// fit (an agent of another version).
    public func data<D: AdminEventData>(as type: D.Type) -> D? {
        guard self.type == D.eventType else { return nil }
        return try? JSONValueDecoder().decode(D.self, from: data)
    }

    /// The data of an event about one document, or nil for another kind of event.
    public var document: Admin.DocumentEvent? {
        guard let kind = Admin.DocumentEvent.Kind(rawValue: type), var event = try? JSONValueDecoder().decode(Admin.DocumentEvent.self, from: data)
        else { return nil }
        event.kind = kind
        return event
    }
}
