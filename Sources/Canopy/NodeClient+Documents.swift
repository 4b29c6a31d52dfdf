import CanopyAdmin
import CanopyCore

/// Reading, saving and deleting the agent's documents (`get`, `put`, `delete`, `conflicts`,
/// `changes`), as ``Database`` does for a database in the process. Every call takes `db`: the
/// agent's database it works on, nil for `default`. Saves use optimistic concurrency: `replacing`
/// is the revision the new body was derived from (nil to create); a stale one fails with
/// ``NodeClientError/agent(code:message:)`` code `conflict`, unless a rule of the agent's covers
/// the document (the write is then kept as a branch and settled as the rule says).
extension NodeClient {
    /// The current revision of a document as the agent returns it.
    public struct Document: Sendable, Equatable {
        /// The document's id.
        public var id: String
        /// The current revision.
        public var revision: RevisionID
        /// The body: the revision's JSON object without the `_` members of CouchDB's shape.
        public var body: JSONValue
        /// The other open leaves, when the document is conflicted (empty otherwise).
        public var conflicts: [RevisionID]

        /// Creates a document value.
        public init(id: String, revision: RevisionID, body: JSONValue, conflicts: [RevisionID] = []) {
            self.id = id
            self.revision = revision
            self.body = body
            self.conflicts = conflicts
        }
    }

    /// One row of the agent's changes feed: a document at its latest change.
    public struct Change: Sendable, Equatable {
        /// The sequence of the change in the database's feed.
        public var sequence: Int64
        /// The document's id.
        public var documentID: String
        /// The document's open leaves, the current revision first.
        public var revisions: [RevisionID]
        /// Whether the current revision is a deletion.
        public var deleted: Bool

        /// Creates a change value.
        public init(sequence: Int64, documentID: String, revisions: [RevisionID], deleted: Bool) {
            self.sequence = sequence
            self.documentID = documentID
            self.revisions = revisions
            self.deleted = deleted
        }
    }

    /// One page of the changes feed.
    public struct ChangesPage: Sendable, Equatable {
        /// The changes after the `since` asked for, in sequence order.
        public var changes: [Change]
        /// The sequence to pass as `since` for the next page.
        public var lastSequence: Int64

        /// Creates a page value.
        public init(changes: [Change], lastSequence: Int64) {
            self.changes = changes
            self.lastSequence = lastSequence
        }
    }

    /// The current revision of `id`; nil when the document does not exist or is deleted.
    public func document(id: String, db: String? = nil) async throws(NodeClientError) -> Document? {
        let reply: Admin.GetDocument.Reply
        do throws(NodeClientError) {
            reply = try await call(Admin.GetDocument(db: db, doc: id, conflicts: true))
        } catch .agent(let code, _) where code == "not_found" {
            return nil
        }
        guard reply.doc.objectValue != nil else { throw .unexpectedResponse("\"doc\" is not an object") }
        if reply.deleted { return nil }
        guard let conflicts = reply.conflicts else { throw .unexpectedResponse("a conflict of \"\(id.prefix(80))\" that is not a revision") }
        guard let revision = reply.revision else { throw .unexpectedResponse("\"_rev\" of \"\(id.prefix(80))\" is not a revision") }
        return Document(id: id, revision: revision, body: reply.body, conflicts: conflicts)
    }

    /// The current revision of `id` decoded as `type` (with `JSONDecoder`); nil when the document
    /// does not exist or is deleted. Throws ``NodeClientError/coding(_:)`` when the body does not
    /// fit `type`.
    public func document<T: Decodable>(id: String, as type: T.Type, db: String? = nil) async throws(NodeClientError) -> T? {
        guard let document = try await document(id: id, db: db) else { return nil }
        do throws(DatabaseError) {
            return try DocumentCoding.decode(type, from: document.body, documentID: id, revision: document.revision)
        } catch {
            throw .coding(error)
        }
    }

    /// Saves `json` (a JSON object) as a new revision of `id` replacing `replacing`, and returns
    /// the new revision.
    @discardableResult
    public func save(json: JSONValue, id: String, replacing: RevisionID? = nil, db: String? = nil) async throws(NodeClientError) -> RevisionID {
        try await Self.revision(of: call(Admin.PutDocument(db: db, doc: id, body: json, rev: replacing)))
    }

    /// Saves `value` (encoded with `JSONEncoder`; it must encode as a JSON object) as a new
    /// revision of `id` replacing `replacing`, and returns the new revision.
    @discardableResult
    public func save<T: Encodable>(_ value: T, id: String, replacing: RevisionID? = nil, db: String? = nil) async throws(NodeClientError) -> RevisionID {
        let json: JSONValue
        do throws(DatabaseError) {
            json = try DocumentCoding.encode(value, documentID: id)
        } catch {
            throw .coding(error)
        }
        return try await save(json: json, id: id, replacing: replacing, db: db)
    }

    /// Deletes `id` by saving a deletion on top of `revision`, and returns the deletion's
    /// revision. A stale `revision` fails with code `conflict`, a missing document with `not_found`.
    @discardableResult
    public func delete(id: String, revision: RevisionID, db: String? = nil) async throws(NodeClientError) -> RevisionID {
        try await Self.revision(of: call(Admin.DeleteDocument(db: db, doc: id, rev: revision)))
    }

    /// The ids of the documents that have conflicting open leaves, as the agent keeps them.
    public func conflictedDocumentIDs(db: String? = nil) async throws(NodeClientError) -> [String] {
        try await call(Admin.ListConflicts(db: db)).conflicts.map(\.doc)
    }

    /// One page of the changes feed: every document changed after `since`, each once at its
    /// latest change, in sequence order; at most `limit` of them (the agent's default, 1000, when
    /// nil). Pass the page's ``ChangesPage/lastSequence`` as `since` for the next page.
    public func changes(since: Int64 = 0, limit: Int? = nil, db: String? = nil) async throws(NodeClientError) -> ChangesPage {
        let reply = try await call(Admin.Changes(db: db, since: since, limit: limit.map(Int64.init)))
        let changes = reply.results.map { row in
            Change(sequence: row.seq, documentID: row.doc, revisions: row.changes.map(\.rev), deleted: row.deleted == true)
        }
        return ChangesPage(changes: changes, lastSequence: reply.lastSeq)
    }

    /// The revision a write's reply names (a write to a local document has none).
    private static func revision(of reply: Admin.WriteReply) throws(NodeClientError) -> RevisionID {
        guard let revision = reply.rev else { throw .unexpectedResponse("the reply names no revision (a local document has none)") }
        return revision
    }
}
