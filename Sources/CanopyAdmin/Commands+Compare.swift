import CanopyCore

extension Admin {
    /// `compare {peer, db?, prefix?, limit?}`: asks a connected peer, over the replication
    /// connection, where its documents and this node's differ (`Protocol/digests.md` §6). The
    /// peer compares only what its share lets this node read.
    public struct Compare: AdminCommand {
        public static let name = "compare"
        /// The peer's node id.
        public var peer: String
        public var db: String?
        /// Only documents whose id starts with this.
        public var prefix: String?
        /// The most differing documents to list (default 1000, at most 100000).
        public var limit: Int?

        public init(peer: String, db: String? = nil, prefix: String? = nil, limit: Int? = nil) {
            self.peer = peer
            self.db = db
            self.prefix = prefix
            self.limit = limit
        }

        /// The differences listed when `limit` is not given, and the most that may be asked for.
        public static let limitDefault = 1000
        public static let limitMax = 100_000

        public struct Reply: Codable, Sendable, Equatable {
            public var db: String
            public var peer: String
            /// True when both sides hold the same documents with the same open leaves, under `prefix`.
            public var identical: Bool
            /// The id prefix compared: empty for every document, else the one asked for or the
            /// longer prefix of the share the peer lets this node read.
            public var prefix: String
            /// The documents that differ, by id (at most `limit`).
            public var differences: [CompareRow]
            /// True when more documents may differ than are listed.
            public var truncated: Bool
            /// The digest-tree nodes the peer answered for, and the requests that took.
            public var nodes: Int
            public var roundTrips: Int

            public init(db: String, peer: String, identical: Bool, prefix: String, differences: [CompareRow], truncated: Bool, nodes: Int, roundTrips: Int) {
                self.db = db
                self.peer = peer
                self.identical = identical
                self.prefix = prefix
                self.differences = differences
                self.truncated = truncated
                self.nodes = nodes
                self.roundTrips = roundTrips
            }
        }
    }

    /// One document that differs between this node and the peer: the open leaves each side
    /// holds (none on the side that does not hold it).
    public struct CompareRow: Codable, Sendable, Equatable {
        public var doc: String
        /// Which side holds what: `local_only`, `remote_only` or `both` (different leaves).
        public var side: CompareSide
        /// This node's open leaves, in revision order.
        public var local: [CompareLeaf]
        /// The peer's open leaves, in revision order.
        public var remote: [CompareLeaf]

        public init(doc: String, side: CompareSide, local: [CompareLeaf], remote: [CompareLeaf]) {
            self.doc = doc
            self.side = side
            self.local = local
            self.remote = remote
        }
    }

    /// An open leaf of a differing document.
    public struct CompareLeaf: Codable, Sendable, Equatable {
        public var rev: RevisionID
        public var deleted: Bool

        public init(rev: RevisionID, deleted: Bool) {
            self.rev = rev
            self.deleted = deleted
        }
    }

    /// Which side of a compare holds a differing document.
    public enum CompareSide: String, Codable, Sendable, CaseIterable {
        case localOnly = "local_only"
        case remoteOnly = "remote_only"
        case both
    }
}
