import CanopyCore
import CanopyStore

// MARK: Documents

extension Admin {
    /// What a write (`put`, `delete`) answers: the document and the revision written. A local
    /// document has no revision (`local: true` instead); a stale write a rule covers is kept as a
    /// branch (`branched: true`, `current` the document's current revision after the rule acted).
    public struct WriteReply: Codable, Sendable, Equatable {
        public var doc: String
        public var rev: RevisionID?
        public var local: Bool?
        public var current: RevisionID?
        public var branched: Bool?

        public init(doc: String, rev: RevisionID? = nil, local: Bool? = nil, current: RevisionID? = nil, branched: Bool? = nil) {
            self.doc = doc
            self.rev = rev
            self.local = local
            self.current = current
            self.branched = branched
        }
    }

    /// `put {db?, doc, body, rev?}`: writes a revision of `doc` replacing `rev` (nil: creates it).
    /// The body's `_id` and `_rev` are checked against `doc` and `rev` and taken out.
    public struct PutDocument: AdminCommand {
        public static let name = "put"
        public typealias Reply = WriteReply
        public var db: String?
        public var doc: String
        /// A JSON object; optional here only so that a missing one is refused in the protocol's
        /// words (`validate`).
        public var body: JSONValue?
        public var rev: RevisionID?

        public init(db: String? = nil, doc: String, body: JSONValue, rev: RevisionID? = nil) {
            self.db = db
            self.doc = doc
            self.body = body
            self.rev = rev
        }

        public func validate() throws(AdminFailure) {
            switch body {
            case nil, .null?: throw AdminFailure(.invalidArgument, "\"put\" needs \"body\": a JSON object")
            case .object?: return
            default: throw AdminFailure(.invalidArgument, "\"body\" must be a JSON object")
            }
        }
    }

    /// `get {db?, doc, rev?, revs?, conflicts?}`: a revision in CouchDB's shape (`_id`, `_rev`,
    /// `_revisions` with `revs`, `_conflicts` and `_deleted_conflicts` with `conflicts`).
    public struct GetDocument: AdminCommand {
        public static let name = "get"
        public var db: String?
        public var doc: String
        public var rev: RevisionID?
        public var revs: Bool?
        public var conflicts: Bool?

        public init(db: String? = nil, doc: String, rev: RevisionID? = nil, revs: Bool = false, conflicts: Bool = false) {
            self.db = db
            self.doc = doc
            self.rev = rev
            self.revs = revs
            self.conflicts = conflicts
        }

        public struct Reply: Codable, Sendable, Equatable {
            /// The document as CouchDB shows it.
            public var doc: JSONValue

            public init(doc: JSONValue) { self.doc = doc }

            /// Its revision (`_rev`); nil when the document has none that reads as one.
            public var revision: RevisionID? {
                guard case .string(let text)? = doc.objectValue?["_rev"] else { return nil }
                return RevisionID(text)
            }

            /// True for a deletion (`_deleted`).
            public var deleted: Bool { doc.objectValue?["_deleted"] == .bool(true) }

            /// The other open leaves (`_conflicts`, asked for with `conflicts`); nil when one of
            /// them does not read as a revision.
            public var conflicts: [RevisionID]? {
                guard case .array(let values)? = doc.objectValue?["_conflicts"] else { return [] }
                var revisions: [RevisionID] = []
                for value in values {
                    guard case .string(let text) = value, let revision = RevisionID(text) else { return nil }
                    revisions.append(revision)
                }
                return revisions
            }

            /// The body: every member but CouchDB's `_` members.
            public var body: JSONValue { .object((doc.objectValue ?? [:]).filter { !$0.key.hasPrefix("_") }) }
        }
    }

    /// `delete {db?, doc, rev}`: writes a deletion on top of `rev` (a local document takes none).
    public struct DeleteDocument: AdminCommand {
        public static let name = "delete"
        public typealias Reply = WriteReply
        public var db: String?
        public var doc: String
        public var rev: RevisionID?

        public init(db: String? = nil, doc: String, rev: RevisionID? = nil) {
            self.db = db
            self.doc = doc
            self.rev = rev
        }
    }

    /// `conflicts {db?}`: every conflicted document.
    public struct ListConflicts: AdminCommand {
        public static let name = "conflicts"
        public var db: String?

        public init(db: String? = nil) { self.db = db }

        public struct Reply: Codable, Sendable, Equatable {
            public var conflicts: [ConflictRow]

            public init(conflicts: [ConflictRow]) { self.conflicts = conflicts }
        }
    }

    /// One conflicted document: its current revision, the other open live leaves (`conflicts`)
    /// and deleted ones (`deleted_conflicts`), and the resolver client it is kept for (null: kept
    /// for `resolve`).
    public struct ConflictRow: Codable, Sendable, Equatable, AdminExplicitNulls {
        public var doc: String
        public var rev: RevisionID
        public var conflicts: [RevisionID]
        public var deletedConflicts: [RevisionID]
        public var resolver: String?

        public init(doc: String, rev: RevisionID, conflicts: [RevisionID], deletedConflicts: [RevisionID], resolver: String?) {
            self.doc = doc
            self.rev = rev
            self.conflicts = conflicts
            self.deletedConflicts = deletedConflicts
            self.resolver = resolver
        }
    }

    /// A conflict's resolution, as `resolve` and a resolver client's answer give it: exactly one
    /// of `pick` (the leaf to keep), `body` (a merged body) or `delete: true`.
    public struct Resolution: Sendable, Equatable {
        public var pick: RevisionID?
        public var body: JSONValue?
        public var delete: Bool?

        public init(pick: RevisionID? = nil, body: JSONValue? = nil, delete: Bool? = nil) {
            self.pick = pick
            self.body = body
            self.delete = delete
        }

        /// Refuses anything but exactly one of the three (a null body counts as none).
        public func validate() throws(AdminFailure) {
            let hasBody = body.map { $0 != .null } ?? false
            guard [pick != nil, hasBody, delete == true].filter({ $0 }).count == 1 else {
                throw AdminFailure(.invalidArgument, "give exactly one of \"pick\" (a revision), \"body\" (an object) or \"delete\": true")
            }
            if let body, body != .null, body.objectValue == nil {
                throw AdminFailure(.invalidArgument, "\"body\" must be a JSON object")
            }
        }
    }

    /// `resolve {db?, doc, pick? | body? | delete?}`: settles a conflict by hand.
    public struct Resolve: AdminCommand {
        public static let name = "resolve"
        public var db: String?
        public var doc: String
        public var pick: RevisionID?
        public var body: JSONValue?
        public var delete: Bool?

        public init(db: String? = nil, doc: String, _ resolution: Resolution) {
            self.db = db
            self.doc = doc
            pick = resolution.pick
            body = resolution.body
            delete = resolution.delete
        }

        /// The resolution it carries.
        public var resolution: Resolution { Resolution(pick: pick, body: body, delete: delete) }

        public func validate() throws(AdminFailure) { try resolution.validate() }

        public struct Reply: Codable, Sendable, Equatable {
            public var doc: String
            /// The document's current revision after the resolution.
            public var rev: RevisionID

            public init(doc: String, rev: RevisionID) {
                self.doc = doc
                self.rev = rev
            }
        }
    }

    /// `changes {db?, since?, limit?}`: one page of the changes feed, each document once at its
    /// latest change.
    public struct Changes: AdminCommand {
        public static let name = "changes"
        public var db: String?
        public var since: Int64?
        public var limit: Int64?

        public init(db: String? = nil, since: Int64 = 0, limit: Int64? = nil) {
            self.db = db
            self.since = since
            self.limit = limit
        }

        public func validate() throws(AdminFailure) {
            try check("since", since, in: 0...Int64.max)
            try check("limit", limit, in: 1...Int64(StoreLimits.changesLimitMax))
        }

        public struct Reply: Codable, Sendable, Equatable {
            public var results: [ChangeRow]
            /// The sequence to pass as `since` for the next page.
            public var lastSeq: Int64

            public init(results: [ChangeRow], lastSeq: Int64) {
                self.results = results
                self.lastSeq = lastSeq
            }
        }
    }

    /// A document in the changes feed: its sequence, its open leaves (the current one first),
    /// and `deleted: true` when its current revision is a deletion.
    public struct ChangeRow: Codable, Sendable, Equatable {
        public var seq: Int64
        public var doc: String
        public var changes: [Leaf]
        public var deleted: Bool?

        public init(seq: Int64, doc: String, changes: [Leaf], deleted: Bool? = nil) {
            self.seq = seq
            self.doc = doc
            self.changes = changes
            self.deleted = deleted
        }

        /// One open leaf.
        public struct Leaf: Codable, Sendable, Equatable {
            public var rev: RevisionID

            public init(rev: RevisionID) { self.rev = rev }
        }
    }
}

// MARK: Attachments

extension Admin {
    /// `attach {db?, doc, name, length, content_type?, rev?}` and `length` bytes (an upload,
    /// Protocol/admin-v1.md §2): a revision of `doc` replacing `rev` (nil: a new document) with
    /// the attachment added or replaced.
    public struct Attach: AdminCommand {
        public static let name = "attach"
        public var db: String?
        public var doc: String
        public var name: String
        /// The number of bytes that follow the line.
        public var length: Int64
        /// Default `application/octet-stream`.
        public var contentType: String?
        public var rev: RevisionID?

        public init(db: String? = nil, doc: String, name: String, length: Int64, contentType: String? = nil, rev: RevisionID? = nil) {
            self.db = db
            self.doc = doc
            self.name = name
            self.length = length
            self.contentType = contentType
            self.rev = rev
        }

        public func validate() throws(AdminFailure) {
            try check("length", length, in: 0...Int64.max)
        }

        public struct Reply: Codable, Sendable, Equatable {
            public var doc: String
            public var rev: RevisionID
            public var name: String
            public var digest: String
            public var length: Int64

            public init(doc: String, rev: RevisionID, name: String, digest: String, length: Int64) {
                self.doc = doc
                self.rev = rev
                self.name = name
                self.digest = digest
                self.length = length
            }
        }
    }

    /// `attachment {db?, doc, name, rev?}` (a download): the response names the content and its
    /// `length` bytes follow the line.
    public struct GetAttachment: AdminCommand {
        public static let name = "attachment"
        public var db: String?
        public var doc: String
        public var name: String
        /// A revision other than the current one.
        public var rev: RevisionID?

        public init(db: String? = nil, doc: String, name: String, rev: RevisionID? = nil) {
            self.db = db
            self.doc = doc
            self.name = name
            self.rev = rev
        }

        public struct Reply: Codable, Sendable, Equatable {
            public var doc: String
            public var rev: RevisionID
            public var name: String
            public var contentType: String
            public var length: Int64
            public var digest: String

            public init(doc: String, rev: RevisionID, name: String, contentType: String, length: Int64, digest: String) {
                self.doc = doc
                self.rev = rev
                self.name = name
                self.contentType = contentType
                self.length = length
                self.digest = digest
            }
        }
    }

    /// `detach {db?, doc, name, rev}`: a revision of `doc` replacing `rev` without the attachment.
    public struct Detach: AdminCommand {
        public static let name = "detach"
        public typealias Reply = WriteReply
        public var db: String?
        public var doc: String
        public var name: String
        public var rev: RevisionID

        public init(db: String? = nil, doc: String, name: String, rev: RevisionID) {
            self.db = db
            self.doc = doc
            self.name = name
            self.rev = rev
        }
    }
}
