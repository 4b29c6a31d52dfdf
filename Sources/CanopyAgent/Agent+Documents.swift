import CanopyAdmin
import CanopyCore
import CanopyReplication
import CanopyStore
import Dispatch

/// Document commands, run on `storeQueue` (the store serialises itself too; the queue keeps a
/// slow store call from holding up the agent's own queue).
extension Agent {
    /// Runs a document command and maps store errors to admin error codes.
    /// `waiting`: for `conflicts`, the resolver each conflict waits for, by database and document.
    func documentCommand(
        _ request: AdminRequest, waiting: [ResolverOffers<ObjectIdentifier>.Key: String] = [:]
    ) -> Result<[String: JSONValue], AdminFailure> {
        dispatchPrecondition(condition: .onQueue(storeQueue))
        do {
            let database = try database(for: request)
            switch request.command {
            case "put": return .success(try put(request, database))
            case "get": return .success(try get(request, database.store))
            case "delete": return .success(try delete(request, database))
            case "conflicts": return .success(try conflicts(database, waiting: waiting))
            case "resolve": return .success(try resolve(request, database))
            case "changes": return .success(try changes(request, database.store))
            case "import": return .success(try importDocuments(request, database))
            case "export": return .success(try exportDocuments(request, database.store))
            case "bulk_docs": return .success(try bulkDocuments(request, database))
            case "attach": return .success(try attach(request, database))
            case "detach": return .success(try detach(request, database))
            default: preconditionFailure("not a document command: \(request.command)")
            }
        } catch let failure as AdminFailure {
            return .failure(failure)
        } catch let error as StoreError {
            return .failure(Self.failure(for: error))
        } catch {
            return .failure(AdminFailure(.failed, "\(error)"))
        }
    }

    /// The admin error code for a store error: stale revisions are `conflict` (canopyctl exit 3),
    /// unknown documents `not_found` (exit 4), bad input `invalid_argument`.
    static func failure(for error: StoreError) -> AdminFailure {
        switch error {
        case .conflict: return AdminFailure(.conflict, error.description)
        case .notFound: return AdminFailure(.notFound, error.description)
        case .invalidInput: return AdminFailure(.invalidArgument, error.description)
        default: return AdminFailure(.failed, error.description)
        }
    }

    private func put(_ request: AdminRequest, _ database: OpenDatabase) throws -> [String: JSONValue] {
        let store = database.store
        let id = try request.string("doc")
        let members = try DocumentMembers(body: try request.object("body"), documentID: id, rev: try request.optionalRevision("rev"))
        if DocumentMembers.isLocal(id) {
            guard members.replacing == nil else { throw Self.localHasNoRevisions(id) }
            try store.localPut(id, body: members.body)
            return ["doc": .string(id), "local": .bool(true)]
        }
        let revision: RevisionID
        do {
            revision = try store.put(id: id, body: members.body, replacing: members.replacing)
        } catch StoreError.conflict(_, let replacing?, _) where coveredByRule(id, members.body, store) {
            return try branch(id, body: members.body, parent: replacing, database)
        }
        events.emit("document.changed", [
            "doc": .string(id), "rev": .string(revision.description), "origin": .string("local"), "db": .string(database.name.text),
        ])
        return ["doc": .string(id), "rev": .string(revision.description)]
    }

    /// True when a rule covers the document (by its id, or the field of the body written; for a
    /// deletion, which writes no body, of the current revision it conflicts with): a config rule,
    /// or a connected resolver's prefix (the store's policy holds both).
    private func coveredByRule(_ id: String, _ body: JSONValue?, _ store: DocumentStore) -> Bool {
        guard case .rules(let rules) = store.conflictPolicy else { return false }
        return rules.rule(for: id, bodies: [body]) != nil
    }

    /// The body of `id`'s current revision when it is live: what a stale deletion would conflict
    /// with, and what a rule matching a body field reads then. Nil when the document is deleted
    /// or cannot be read.
    private static func liveBody(of id: String, _ store: DocumentStore) -> JSONValue? {
        guard let current = try? store.get(id: id), !current.isDeleted else { return nil }
        return current.body
    }

    /// A stale write to a document a rule covers: kept as a branch from the revision it replaced,
    /// and the conflict settled by the rule as one from a peer would be (`DocumentStore.putBranch`).
    /// The reply's `rev` is the revision written; `current` the document's current revision after
    /// the rule acted, and `branched: true` says the write met a newer revision.
    private func branch(_ id: String, body: JSONValue?, parent: RevisionID, _ database: OpenDatabase) throws -> [String: JSONValue] {
        let (revision, result) = try database.store.putBranch(id: id, body: body, parent: parent)
        var changed: [String: JSONValue] = [
            "doc": .string(id), "rev": .string(result.current.description), "origin": .string("local"), "db": .string(database.name.text),
        ]
        if result.currentIsDeleted { changed["deleted"] = .bool(true) }
        events.emit("document.changed", changed)
        events.emit(documentEvents: DocumentEvent.conflictEvents(for: result), peer: "", database: database.name)
        return ["doc": .string(id), "rev": .string(revision.description), "current": .string(result.current.description), "branched": .bool(true)]
    }

    private func get(_ request: AdminRequest, _ store: DocumentStore) throws -> [String: JSONValue] {
        let id = try request.string("doc")
        var options: GetOptions = []
        if try request.bool("revs") { options.insert(.revisions) }
        if try request.bool("conflicts") { options.insert(.conflicts) }
        if DocumentMembers.isLocal(id) {
            guard try request.optionalRevision("rev") == nil else { throw Self.localHasNoRevisions(id) }
            guard var members = try store.localGet(id)?.objectValue else { throw Self.localNotFound(id) }
            members["_id"] = .string(id)
            return ["doc": .object(members)]
        }
        let document: Document
        if let revision = try request.optionalRevision("rev") {
            document = try store.get(id: id, rev: revision, options: options)
        } else {
            document = try store.get(id: id, options: options)
        }
        return ["doc": try Self.couchDocument(document)]
    }

    private func delete(_ request: AdminRequest, _ database: OpenDatabase) throws -> [String: JSONValue] {
        let store = database.store
        let id = try request.string("doc")
        if DocumentMembers.isLocal(id) {
            guard try request.optionalRevision("rev") == nil else { throw Self.localHasNoRevisions(id) }
            guard try store.localDelete(id) else { throw Self.localNotFound(id) }
            return ["doc": .string(id), "local": .bool(true)]
        }
        let named = try request.revision("rev")
        let revision: RevisionID
        do {
            revision = try store.delete(id: id, rev: named)
        } catch {
            // As a stale put: kept as a branch from the revision it named, for the rule to settle.
            // A document deleted already has nothing the deletion could conflict with: refused.
            guard case .conflict(_, let replacing?, _) = error, let current = Self.liveBody(of: id, store),
                coveredByRule(id, current, store)
            else { throw error }
            return try branch(id, body: nil, parent: replacing, database)
        }
        events.emit("document.changed", [
            "doc": .string(id), "rev": .string(revision.description), "deleted": .bool(true), "origin": .string("local"),
            "db": .string(database.name.text),
        ])
        return ["doc": .string(id), "rev": .string(revision.description)]
    }

    private static func localHasNoRevisions(_ id: String) -> AdminFailure {
        AdminFailure(
            .invalidArgument,
            "\"\(id.prefix(80))\" is a local document: it has no revisions (a put replaces it); leave out rev and _rev")
    }

    private static func localNotFound(_ id: String) -> AdminFailure {
        AdminFailure(.notFound, "not found: local document \"\(id.prefix(80))\"")
    }

    /// `conflicts`: every conflicted document with its leaves (the other open live ones in
    /// `conflicts`, the open deleted ones in `deleted_conflicts`), and the resolver client it is
    /// kept for (null: kept for `resolve`).
    private func conflicts(_ database: OpenDatabase, waiting: [ResolverOffers<ObjectIdentifier>.Key: String]) throws -> [String: JSONValue] {
        let store = database.store
        let ids = try store.conflictedDocumentIDs()
        let rows = try ids.map { id -> JSONValue in
            let document = try store.get(id: id, options: .conflicts)
            return .object([
                "doc": .string(id), "rev": .string(document.revision.description),
                "conflicts": .array((document.conflicts ?? []).map { .string($0.description) }),
                "deleted_conflicts": .array((document.deletedConflicts ?? []).map { .string($0.description) }),
                "resolver": waiting[ResolverOffers.Key(database.name, id)].map(JSONValue.string) ?? .null,
            ])
        }
        return ["conflicts": .array(rows)]
    }

    /// `resolve`: exactly one of `pick` (a leaf to keep), `body` (a merged body) or `delete: true`.
    private func resolve(_ request: AdminRequest, _ database: OpenDatabase) throws -> [String: JSONValue] {
        let id = try request.string("doc")
        let decision = try Self.decision(from: request, documentID: id)
        try checkApplicable(decision, to: id, in: database.store)
        let current = try database.store.resolveConflicts(id: id, resolver: ClosureResolver { _ in decision })
        events.emit("conflict.resolved", [
            "doc": .string(id), "rev": .string(current.description), "by": .string("manual"), "db": .string(database.name.text),
        ])
        // An offer outstanding for it is void now.
        queue.async { self.resolvers.forget(id, in: database.name) }
        return ["doc": .string(id), "rev": .string(current.description)]
    }

    /// Refuses a resolution of a document that is not conflicted (`not_conflicted`) or one that
    /// picks a revision that is not one of its open leaves (`invalid_argument`); the conflict is
    /// then kept. Shared by `resolve` and a resolver's answer, which are applied alike. The open
    /// leaves are the live ones (`_conflicts`) and the deleted ones (`_deleted_conflicts`): an
    /// edit against a deletion is a conflict whose other leaf is deleted.
    func checkApplicable(_ decision: ResolutionDecision, to id: String, in store: DocumentStore) throws {
        dispatchPrecondition(condition: .onQueue(storeQueue))
        let before = try store.get(id: id, options: .conflicts)
        let others = (before.conflicts ?? []) + (before.deletedConflicts ?? [])
        guard !others.isEmpty else {
            throw AdminFailure(.notConflicted, "document \"\(id.prefix(80))\" is not conflicted: \(before.revision) is its only open leaf; nothing to resolve")
        }
        // Deletions alone never conflict (the current revision is a deletion only when no live leaf is open).
        guard !before.kind.isDeleted else {
            throw AdminFailure(.notConflicted, "document \"\(id.prefix(80))\" is not conflicted: its open leaves are all deletions; nothing to resolve")
        }
        if case .keep(let revision) = decision, revision != before.revision, !others.contains(revision) {
            throw AdminFailure(.invalidArgument, "\(revision) is not one of the conflicting leaves of \"\(id.prefix(80))\"; the conflict is kept")
        }
    }

    /// Reads the resolution a request or resolver answer carries for `documentID` (nil when the
    /// answer's ticket is unknown; it is refused after this).
    static func decision(from request: AdminRequest, documentID: String?) throws(AdminFailure) -> ResolutionDecision {
        let pick = try request.optionalRevision("pick")
        let hasBody = request.arguments["body"].map { $0 != .null } ?? false
        let delete = try request.bool("delete")
        guard [pick != nil, hasBody, delete].filter({ $0 }).count == 1 else {
            throw AdminFailure(.invalidArgument, "give exactly one of \"pick\" (a revision), \"body\" (an object) or \"delete\": true")
        }
        if let pick { return .keep(pick) }
        if delete { return .delete }
        return .merged(try DocumentMembers.resolutionBody(try request.object("body"), documentID: documentID))
    }

    private func changes(_ request: AdminRequest, _ store: DocumentStore) throws -> [String: JSONValue] {
        let since = try request.optionalInt("since", in: 0...Int64.max) ?? 0
        let limit = try request.optionalInt("limit", in: 1...Int64(AgentLimits.changesLimitMax)) ?? Int64(AgentLimits.changesDefaultLimit)
        let page = try store.changesPage(since: since, limit: Int(limit))
        let rows = page.changes.map { change -> JSONValue in
            var row: [String: JSONValue] = [
                "seq": .int(change.sequence), "doc": .string(change.documentID),
                "changes": .array(change.leaves.filter { !$0.kind.isClosed }.map { .object(["rev": .string($0.revision.description)]) }),
            ]
            if change.deleted { row["deleted"] = .bool(true) }
            return .object(row)
        }
        return ["results": .array(rows), "last_seq": .int(page.lastSequence ?? since)]
    }

    /// `stats`: the store's counts and the agent's traffic figures. `listening` is read off
    /// `queue` here: `start` sets it once, before the admin socket accepts the connection that asks.
    func stats() throws(StoreError) -> Admin.Stats.Reply {
        let traffic = peers.traffic.totals
        return Admin.Stats.Reply(
            counts: try storeCounts(of: store), revsLimit: Int64(store.revsLimit), adminClients: Int64(listening?.admin.clientCount ?? 0),
            uptimeSeconds: (Self.wallClock() - startedAt).rounded(), peerBytesSent: Int64(traffic.sent),
            peerBytesReceived: Int64(traffic.received))
    }

    /// Document, sequence and conflict counts of `store`, shared by `status`, `stats` and `db.list`.
    func storeCounts(of store: DocumentStore) throws(StoreError) -> Admin.DatabaseCounts {
        dispatchPrecondition(condition: .notOnQueue(queue))
        let counts = try store.counts()
        return Admin.DatabaseCounts(
            docCount: Int64(counts.documents - counts.deleted), docDelCount: Int64(counts.deleted), updateSeq: store.lastSequence,
            conflictedCount: Int64(counts.conflicted), awaitingAttachments: Int64(counts.awaitingContent))
    }

    /// What `body` returns, or the admin error for what it threw: a store error as
    /// `failure(for:)` maps it, an admin failure as it is, anything else `failed`.
    func storeResult<T>(_ body: () throws -> T) -> Result<T, AdminFailure> {
        do {
            return .success(try body())
        } catch let failure as AdminFailure {
            return .failure(failure)
        } catch let error as StoreError {
            return .failure(Self.failure(for: error))
        } catch {
            return .failure(AdminFailure(.failed, "\(error)"))
        }
    }
}
