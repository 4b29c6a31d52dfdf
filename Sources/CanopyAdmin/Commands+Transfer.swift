import CanopyCore
import CanopyStore

// MARK: Import, export and bulk writes

extension ImportConflicts: AdminChoice {}

extension Admin {
    /// `import {db?, docs, couchdb?, conflicts?, new_edits?}`: a `_bulk_docs` body with
    /// `new_edits: false`, its revisions inserted as they are, as if a peer had sent them, all in
    /// one transaction. `conflicts` says what becomes of the conflicts they bring (default
    /// `settle`, or `keep` with `couchdb`).
    public struct ImportDocuments: AdminCommand {
        public static let name = "import"
        public var db: String?
        /// CouchDB documents with `_id`, `_rev` and `_revisions`; optional here only so that a
        /// missing array is refused in the protocol's words (`validate`).
        public var docs: [JSONValue]?
        /// The documents come from CouchDB: its winner among their leaves is kept as the winner.
        public var couchdb: Bool?
        public var conflicts: ImportConflicts?
        /// Only `false` (the revisions are inserted as they are).
        public var newEdits: Bool?

        public init(db: String? = nil, docs: [JSONValue], couchdb: Bool = false, conflicts: ImportConflicts? = nil) {
            self.db = db
            self.docs = docs
            self.couchdb = couchdb
            self.conflicts = conflicts
            self.newEdits = false
        }

        public func validate() throws(AdminFailure) {
            if docs == nil { throw AdminFailure(.invalidArgument, "\"import\" needs \"docs\": an array of CouchDB documents") }
            if newEdits == true {
                throw AdminFailure(.invalidArgument, "only \"new_edits\": false is supported (revisions are imported as they are)")
            }
        }

        public struct Reply: Codable, Sendable, Equatable {
            /// Entries read.
            public var documents: Int64
            /// Revisions the node did not hold before.
            public var revisionsAdded: Int64

            public init(documents: Int64, revisionsAdded: Int64) {
                self.documents = documents
                self.revisionsAdded = revisionsAdded
            }
        }
    }

    /// `bulk_docs {db?, docs, new_edits?}`: CouchDB's `_bulk_docs`. With `new_edits` true (the
    /// default) each entry is a new revision of its `_id`, written on its own in one
    /// transaction; with `new_edits: false` it is `import` (and takes `couchdb` and
    /// `conflicts`).
    public struct BulkDocuments: AdminCommand {
        public static let name = "bulk_docs"
        public var db: String?
        /// Documents with `_id`, `_rev` when replacing one, `_deleted: true` to delete.
        public var docs: [JSONValue]?
        public var newEdits: Bool?
        public var couchdb: Bool?
        public var conflicts: ImportConflicts?

        public init(db: String? = nil, docs: [JSONValue]) {
            self.db = db
            self.docs = docs
        }

        public func validate() throws(AdminFailure) {
            if docs == nil, newEdits != false {
                throw AdminFailure(.invalidArgument, "\"bulk_docs\" needs \"docs\": an array of documents with _id")
            }
        }

        /// The import this request is when `new_edits` is false.
        public var asImport: ImportDocuments? {
            guard newEdits == false else { return nil }
            var command = ImportDocuments(db: db, docs: [], couchdb: couchdb ?? false, conflicts: conflicts)
            command.docs = docs
            return command
        }

        /// What the entries became, or (with `new_edits: false`) the import's reply.
        public enum Reply: Codable, Sendable, Equatable {
            case written(Written)
            case imported(ImportDocuments.Reply)

            /// The entries written: one row each in order, and the counts.
            public struct Written: Codable, Sendable, Equatable {
                public var results: [Row]
                public var written: Int64
                public var conflicts: Int64

                public init(results: [Row], written: Int64, conflicts: Int64) {
                    self.results = results
                    self.written = written
                    self.conflicts = conflicts
                }
            }

            /// One entry: `{id, rev}` written, or `{id, error: "conflict", reason}` when its
            /// `_rev` was stale.
            public struct Row: Codable, Sendable, Equatable {
                public var id: String
                public var rev: RevisionID?
                public var error: String?
                public var reason: String?

                public init(id: String, rev: RevisionID? = nil, error: String? = nil, reason: String? = nil) {
                    self.id = id
                    self.rev = rev
                    self.error = error
                    self.reason = reason
                }
            }

            private enum Key: String, CodingKey { case results }

            public init(from decoder: any Decoder) throws {
                let container = try decoder.container(keyedBy: Key.self)
                let value = try decoder.singleValueContainer()
                self = container.contains(.results) ? .written(try value.decode(Written.self)) : .imported(try value.decode(ImportDocuments.Reply.self))
            }

            public func encode(to encoder: any Encoder) throws {
                var container = encoder.singleValueContainer()
                switch self {
                case .written(let written): try container.encode(written)
                case .imported(let imported): try container.encode(imported)
                }
            }
        }
    }

    /// A stored document or revision that could not be read (`export`, `check`): which, why,
    /// and its database where a reply covers more than one.
    public struct DamageRow: Codable, Sendable, Equatable {
        public var db: String?
        public var doc: String
        public var rev: RevisionID?
        public var reason: String

        public init(db: String? = nil, doc: String, rev: RevisionID? = nil, reason: String) {
            self.db = db
            self.doc = doc
            self.rev = rev
            self.reason = reason
        }
    }

    /// `export {db?, since?, limit?, skip_leaves?, attachments?}`: one page of documents in
    /// change order, every leaf with its history, in CouchDB's shape.
    public struct ExportDocuments: AdminCommand {
        public static let name = "export"
        public var db: String?
        public var since: Int64?
        /// Documents per page, 1–100 000 (default 1 000).
        public var limit: Int64?
        /// Leaves of the first document already exported (the previous page's `next_leaf`).
        public var skipLeaves: Int64?
        /// Each attachment's content inline (base64 `data`), as CouchDB's `attachments=true`.
        public var attachments: Bool?

        public init(db: String? = nil, since: Int64 = 0, limit: Int64? = nil, skipLeaves: Int64? = nil, attachments: Bool = false) {
            self.db = db
            self.since = since
            self.limit = limit
            self.skipLeaves = skipLeaves
            self.attachments = attachments
        }

        public func validate() throws(AdminFailure) {
            try check("since", since, in: 0...Int64.max)
            try check("limit", limit, in: 1...Int64(StoreLimits.changesLimitMax))
            try check("skip_leaves", skipLeaves, in: 0...Int64(Int32.max))
        }

        public struct Reply: Codable, Sendable, Equatable {
            /// Revisions in CouchDB's shape.
            public var docs: [JSONValue]
            /// The sequence of the last document exported whole: the next page's `since`.
            public var lastSeq: Int64
            /// True on the last page.
            public var done: Bool
            /// When the page ends inside a document: how many of its leaves were sent (the next
            /// page's `skip_leaves`).
            public var nextLeaf: Int64?
            /// Documents the page passed over because they could not be read.
            public var damaged: [DamageRow]

            public init(docs: [JSONValue], lastSeq: Int64, done: Bool, nextLeaf: Int64? = nil, damaged: [DamageRow] = []) {
                self.docs = docs
                self.lastSeq = lastSeq
                self.done = done
                self.nextLeaf = nextLeaf
                self.damaged = damaged
            }
        }
    }
}

extension AdminRequestLine {
    /// `command`'s request line with `id` and `docs` spliced in as they are (each one encoded
    /// JSON value): what a client streaming a large body sends without decoding every
    /// document. `command.docs` is ignored.
    public static func encode(_ command: Admin.BulkDocuments, id: Int64, encodedDocs docs: [[UInt8]]) -> [UInt8] {
        var head = command
        head.docs = []
        var line = encode(head, id: id)
        // The canonical encoding sorts members and this command has no nested objects, so
        // `"docs":[]` is the one member of that name; the documents go between its brackets.
        guard let empty = line.firstRange(of: Array(#""docs":[]"#.utf8)) else {
            preconditionFailure("bulk_docs line without its docs member")
        }
        var joined: [UInt8] = []
        joined.reserveCapacity(docs.reduce(docs.count) { $0 + $1.count })
        for (index, doc) in docs.enumerated() {
            if index > 0 { joined.append(UInt8(ascii: ",")) }
            joined += doc
        }
        line.insert(contentsOf: joined, at: empty.upperBound - 1)
        return line
    }
}
