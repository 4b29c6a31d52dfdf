import CanopyCore

extension Admin {
    /// `why {db?, doc, peer?}`: for each configured peer (or the one named), whether it holds
    /// this node's current revision of the document, and if not, why not.
    public struct Why: AdminCommand {
        public static let name = "why"
        public var db: String?
        public var doc: String
        /// Only this peer (a node id); every configured peer when nil.
        public var peer: String?

        public init(db: String? = nil, doc: String, peer: String? = nil) {
            self.db = db
            self.doc = doc
            self.peer = peer
        }

        public struct Reply: Codable, Sendable, Equatable, AdminExplicitNulls {
            public var db: String
            public var doc: String
            /// This node's current revision; null when it holds none yet (see `awaitingContent`).
            public var rev: RevisionID?
            public var deleted: Bool
            /// Revisions of the document received from peers that wait here for their
            /// attachment content (invisible until it is complete and verified).
            public var awaitingContent: Int64
            /// The resolver client this node's conflict on the document waits for; null when
            /// it is not waiting for one.
            public var awaitingResolver: String?
            public var peers: [WhyRow]

            public init(db: String, doc: String, rev: RevisionID?, deleted: Bool, awaitingContent: Int64, awaitingResolver: String?, peers: [WhyRow]) {
                self.db = db
                self.doc = doc
                self.rev = rev
                self.deleted = deleted
                self.awaitingContent = awaitingContent
                self.awaitingResolver = awaitingResolver
                self.peers = peers
            }
        }
    }

    /// Why a peer holds, or does not hold, this node's current revision of a document.
    public enum WhyReason: String, Codable, Sendable, CaseIterable {
        /// The database is not shared with the peer.
        case notShared = "not_shared"
        /// The share has a prefix the document's id does not start with.
        case outsidePrefix = "outside_prefix"
        /// This node's share lets the peer write here only: it is sent nothing.
        case notSent = "not_sent"
        /// This node does not hold the document yet: its revisions wait for their attachment content.
        case awaitingContent = "awaiting_content"
        /// The peer refused the document when it was sent (`detail` has its reason).
        case refusedByPeer = "refused_by_peer"
        /// The peer does not take this node's writes: it subscribed for nothing (its share
        /// lets this node read only) or for other documents.
        case peerDoesNotTake = "peer_does_not_take"
        /// The peer acknowledged it (it holds this revision or a newer one of its own).
        case holds
        /// The peer is not connected (`since`: when it went offline, null when it was not
        /// connected since the agent started).
        case offline
        /// The document's conflict here waits for a resolver client (`resolver`); its outcome is
        /// what the peer will be sent.
        case awaitingResolver = "awaiting_resolver"
        /// Connected, and the change is not acknowledged yet: it is on its way.
        case queued
    }

    /// One peer's row of `why`.
    public struct WhyRow: Codable, Sendable, Equatable, AdminExplicitNulls {
        public var nodeID: String
        public var holds: Bool
        public var reason: WhyReason
        /// The reason for people, one sentence.
        public var detail: String
        /// `offline`: when the connection went down (Unix seconds); null otherwise.
        public var since: Double?
        /// `awaiting_resolver`: the resolver's name; null otherwise.
        public var resolver: String?

        public init(nodeID: String, holds: Bool, reason: WhyReason, detail: String, since: Double? = nil, resolver: String? = nil) {
            self.nodeID = nodeID
            self.holds = holds
            self.reason = reason
            self.detail = detail
            self.since = since
            self.resolver = resolver
        }
    }
}
