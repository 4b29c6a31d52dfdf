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
        let response: [String: JSONValue]
        do throws(NodeClientError) {
            response = try await request("get", Self.arguments(db, ["doc": .string(id), "conflicts": .bool(true)]))
        } catch .agent(let code, _) where code == "not_found" {
            return nil
        }
        guard let members = response["doc"]?.objectValue else { throw .unexpectedResponse("no \"doc\" object in the response") }
        if members["_deleted"] == .bool(true) { return nil }
        var conflicts: [RevisionID] = []
        if case .array(let values)? = members["_conflicts"] {
            for case .string(let text) in values {
                guard let revision = RevisionID(text) else { throw .unexpectedResponse("a conflict that is not a revision: \(text.prefix(80))") }
                conflicts.append(revision)
            }
        }
        return Document(
            id: id, revision: try Self.revision(members, "_rev"), body: .object(members.filter { !$0.key.hasPrefix("_") }),
            conflicts: conflicts)
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
        var arguments: [String: JSONValue] = ["doc": .string(id), "body": json]
        if let replacing { arguments["rev"] = .string(replacing.description) }
        return try Self.revision(try await request("put", Self.arguments(db, arguments)), "rev")
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
        let response = try await request("delete", Self.arguments(db, ["doc": .string(id), "rev": .string(revision.description)]))
        return try Self.revision(response, "rev")
    }

    /// The ids of the documents that have conflicting open leaves, as the agent keeps them.
    public func conflictedDocumentIDs(db: String? = nil) async throws(NodeClientError) -> [String] {
        var ids: [String] = []
        for row in try Self.rows(try await request("conflicts", Self.arguments(db, [:])), "conflicts") {
            ids.append(try Self.string(row, "doc"))
        }
        return ids
    }

    /// One page of the changes feed: every document changed after `since`, each once at its
    /// latest change, in sequence order; at most `limit` of them (the agent's default, 1000, when
    /// nil). Pass the page's ``ChangesPage/lastSequence`` as `since` for the next page.
    public func changes(since: Int64 = 0, limit: Int? = nil, db: String? = nil) async throws(NodeClientError) -> ChangesPage {
        var arguments: [String: JSONValue] = ["since": .int(since)]
        if let limit { arguments["limit"] = .int(Int64(limit)) }
        let response = try await request("changes", Self.arguments(db, arguments))
        var changes: [Change] = []
        for row in try Self.rows(response, "results") {
            var revisions: [RevisionID] = []
            for leaf in try Self.rows(row, "changes") {
                revisions.append(try Self.revision(leaf, "rev"))
            }
            changes.append(Change(
                sequence: try Self.int(row, "seq"), documentID: try Self.string(row, "doc"), revisions: revisions,
                deleted: row["deleted"] == .bool(true)))
        }
        return ChangesPage(changes: changes, lastSequence: try Self.int(response, "last_seq"))
    }

    /// `arguments` with `db` added when one is named.
    private static func arguments(_ db: String?, _ arguments: [String: JSONValue]) -> [String: JSONValue] {
        var arguments = arguments
        if let db { arguments["db"] = .string(db) }
        return arguments
    }
}
