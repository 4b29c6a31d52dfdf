import CanopyCore

// MARK: Databases and sharing

extension Admin {
    /// What a peer may do to this node's copy of a database, as `share` grants it. (The config
    /// file has a fourth value, `none`, which `unshare` writes; a share always grants something.)
    public enum Access: String, Sendable, Equatable, CaseIterable, AdminChoice {
        /// The peer may pull from this node.
        case read
        /// The peer may push into this node.
        case write
        /// Both.
        case readWrite = "read-write"
    }

    /// A peer a database is shared with: what it may do (`read`, `write`, `read-write`) and,
    /// when only some documents, their id prefix.
    public struct Share: Codable, Sendable, Equatable {
        public var nodeID: String
        public var access: String
        public var prefix: String?

        public init(nodeID: String, access: String, prefix: String? = nil) {
            self.nodeID = nodeID
            self.access = access
            self.prefix = prefix
        }
    }

    /// A database's reply: its name.
    public struct DatabaseReply: Codable, Sendable, Equatable {
        public var db: String

        public init(db: String) { self.db = db }
    }

    /// A database and a peer, the reply of `unshare` and `db.dismiss`.
    public struct DatabasePeerReply: Codable, Sendable, Equatable {
        public var db: String
        public var nodeID: String

        public init(db: String, nodeID: String) {
            self.db = db
            self.nodeID = nodeID
        }
    }

    /// `db.create {name, revs_limit?, conflicts?}`: makes a database with its own file.
    public struct CreateDatabase: AdminCommand {
        public static let name = "db.create"
        public var name: String
        /// 2–100 000; default the config's `revs-limit`.
        public var revsLimit: Int64?
        /// A strategy as the config's `conflicts` spells it (not `resolver NAME`); default `automatic`.
        public var conflicts: String?

        public init(name: String, revsLimit: Int64? = nil, conflicts: String? = nil) {
            self.name = name
            self.revsLimit = revsLimit
            self.conflicts = conflicts
        }

        public func validate() throws(AdminFailure) {
            try check("revs_limit", revsLimit, in: 2...100_000)
        }

        public struct Reply: Codable, Sendable, Equatable {
            public var db: String
            public var revsLimit: Int64
            public var conflicts: String

            public init(db: String, revsLimit: Int64, conflicts: String) {
                self.db = db
                self.revsLimit = revsLimit
                self.conflicts = conflicts
            }
        }
    }

    /// `db.delete {name}`: removes a database with every document in it.
    public struct DeleteDatabase: AdminCommand {
        public static let name = "db.delete"
        public var name: String

        public init(name: String) { self.name = name }

        public struct Reply: Codable, Sendable, Equatable {
            public var db: String
            public var deleted: Bool

            public init(db: String, deleted: Bool) {
                self.db = db
                self.deleted = deleted
            }
        }
    }

    /// `db.list`: every database with its counts, settings and shares, `default` first.
    public struct ListDatabases: AdminCommand {
        public static let name = "db.list"
        public init() {}

        public struct Reply: Codable, Sendable, Equatable {
            public var databases: [DatabaseRow]

            public init(databases: [DatabaseRow]) { self.databases = databases }
        }
    }

    /// One database as `db.list` shows it.
    public struct DatabaseRow: Codable, Sendable, Equatable {
        public var db: String
        public var counts: DatabaseCounts
        /// Its conflicted documents kept for a resolver client.
        public var conflictsAwaitingResolver: Int64
        public var revsLimit: Int64
        public var conflicts: String
        /// Its rules, in the order they are tried.
        public var rules: [Rule]
        public var sharedWith: [Share]

        public init(
            db: String, counts: DatabaseCounts, conflictsAwaitingResolver: Int64, revsLimit: Int64, conflicts: String, rules: [Rule],
            sharedWith: [Share]
        ) {
            self.db = db
            self.counts = counts
            self.conflictsAwaitingResolver = conflictsAwaitingResolver
            self.revsLimit = revsLimit
            self.conflicts = conflicts
            self.rules = rules
            self.sharedWith = sharedWith
        }
    }

    /// `db.pending`: databases configured peers asked to replicate that are not shared with them.
    public struct ListPendingShares: AdminCommand {
        public static let name = "db.pending"
        public init() {}

        public struct Reply: Codable, Sendable, Equatable {
            public var pending: [PendingShare]

            public init(pending: [PendingShare]) { self.pending = pending }
        }
    }

    /// A database a peer asked for: whether this node has it, how often and when it asked.
    public struct PendingShare: Codable, Sendable, Equatable {
        public var db: String
        public var nodeID: String
        public var exists: Bool
        public var attempts: Int64
        /// Seconds since 1970.
        public var firstSeen: Double
        public var lastSeen: Double

        public init(db: String, nodeID: String, exists: Bool, attempts: Int64, firstSeen: Double, lastSeen: Double) {
            self.db = db
            self.nodeID = nodeID
            self.exists = exists
            self.attempts = attempts
            self.firstSeen = firstSeen
            self.lastSeen = lastSeen
        }
    }

    /// `db.dismiss {db, node_id}`: dismisses a pending offer, across restarts.
    public struct DismissPendingShare: AdminCommand {
        public static let name = "db.dismiss"
        public typealias Reply = DatabasePeerReply
        public var db: String
        public var nodeID: String

        public init(db: String, nodeID: String) {
            self.db = db
            self.nodeID = nodeID
        }
    }

    /// `share {db, node_id, access, prefix?}`: lets a configured peer read and/or write this
    /// node's copy of a database, or its documents whose id starts with `prefix`.
    public struct ShareDatabase: AdminCommand {
        public static let name = "share"
        public var db: String
        public var nodeID: String
        public var access: Access
        public var prefix: String?

        public init(db: String, nodeID: String, access: Access, prefix: String? = nil) {
            self.db = db
            self.nodeID = nodeID
            self.access = access
            self.prefix = prefix
        }

        public struct Reply: Codable, Sendable, Equatable {
            public var db: String
            public var sharedWith: Share

            public init(db: String, sharedWith: Share) {
                self.db = db
                self.sharedWith = sharedWith
            }
        }
    }

    /// `unshare {db, node_id}`: the peer may no longer read or write the database.
    public struct UnshareDatabase: AdminCommand {
        public static let name = "unshare"
        public typealias Reply = DatabasePeerReply
        public var db: String
        public var nodeID: String

        public init(db: String, nodeID: String) {
            self.db = db
            self.nodeID = nodeID
        }
    }

    /// `compact {db?}`: drops old bodies of one database (every database when nil), then the
    /// attachment content no kept revision of any database names.
    public struct Compact: AdminCommand {
        public static let name = "compact"
        public var db: String?

        public init(db: String? = nil) { self.db = db }

        public struct Reply: Codable, Sendable, Equatable {
            public var databases: [String]
            public var bodiesDropped: Int64
            public var attachmentsRemoved: Int64
            public var attachmentBytesFreed: Int64
            public var attachmentsKept: Int64
            public var attachmentsPinned: Int64

            public init(
                databases: [String], bodiesDropped: Int64, attachmentsRemoved: Int64, attachmentBytesFreed: Int64, attachmentsKept: Int64,
                attachmentsPinned: Int64
            ) {
                self.databases = databases
                self.bodiesDropped = bodiesDropped
                self.attachmentsRemoved = attachmentsRemoved
                self.attachmentBytesFreed = attachmentBytesFreed
                self.attachmentsKept = attachmentsKept
                self.attachmentsPinned = attachmentsPinned
            }
        }
    }
}
