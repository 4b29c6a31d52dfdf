import CanopyAdmin
import CanopyCore
import CanopyReplication
import CanopyStore
import Dispatch

/// Document commands, run on `storeQueue` (the store serialises itself too; the queue keeps a
/// slow store call from holding up the agent's own queue).
extension Agent {
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

    func put(_ command: Admin.PutDocument) throws -> Admin.WriteReply {
        let database = try database(named: command.db)
        let store = database.store
        let id = command.doc
        let members = try DocumentMembers(body: command.body ?? .null, documentID: id, rev: command.rev)
        if DocumentMembers.isLocal(id) {
            guard members.replacing == nil else { throw Self.localHasNoRevisions(id) }
            try store.localPut(id, body: members.body)
            return Admin.WriteReply(doc: id, local: true)
        }
        let revision: RevisionID
        do {
            revision = try store.put(id: id, body: members.body, replacing: members.replacing)
        } catch {
            // A stale write a rule covers is kept as a branch, for the rule to settle.
            guard case .conflict(_, let replacing?, _) = error, coveredByRule(id, members.body, store) else { throw error }
            return try branch(id, body: members.body, parent: replacing, database)
        }
        events.emit(.localChange(db: database.name.text, doc: id, rev: revision))
        return Admin.WriteReply(doc: id, rev: revision)
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
    private func branch(_ id: String, body: JSONValue?, parent: RevisionID, _ database: OpenDatabase) throws -> Admin.WriteReply {
        let (revision, result) = try database.store.putBranch(id: id, body: body, parent: parent)
        events.emit(.localChange(db: database.name.text, doc: id, rev: result.current, deleted: result.currentIsDeleted))
        events.emit(documentEvents: DocumentEvent.conflictEvents(for: result), peer: "", database: database.name)
        return Admin.WriteReply(doc: id, rev: revision, current: result.current, branched: true)
    }

    func get(_ command: Admin.GetDocument) throws -> Admin.GetDocument.Reply {
        let store = try database(named: command.db).store
        let id = command.doc
        var options: GetOptions = []
        if command.revs == true { options.insert(.revisions) }
        if command.conflicts == true { options.insert(.conflicts) }
        if DocumentMembers.isLocal(id) {
            guard command.rev == nil else { throw Self.localHasNoRevisions(id) }
            guard var members = try store.localGet(id)?.objectValue else { throw Self.localNotFound(id) }
            members["_id"] = .string(id)
            return Admin.GetDocument.Reply(doc: .object(members))
        }
        let document: Document
        if let revision = command.rev {
            document = try store.get(id: id, rev: revision, options: options)
        } else {
            document = try store.get(id: id, options: options)
        }
        return Admin.GetDocument.Reply(doc: try Self.couchDocument(document))
    }

    func delete(_ command: Admin.DeleteDocument) throws -> Admin.WriteReply {
        let database = try database(named: command.db)
        let store = database.store
        let id = command.doc
        if DocumentMembers.isLocal(id) {
            guard command.rev == nil else { throw Self.localHasNoRevisions(id) }
            guard try store.localDelete(id) else { throw Self.localNotFound(id) }
            return Admin.WriteReply(doc: id, local: true)
        }
        guard let named = command.rev else { throw AdminFailure(.invalidArgument, "\"delete\" needs \"rev\": a revision id") }
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
        events.emit(.localChange(db: database.name.text, doc: id, rev: revision, deleted: true))
        return Admin.WriteReply(doc: id, rev: revision)
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
    func conflicts(_ command: Admin.ListConflicts, waiting: [ResolverOffers<ObjectIdentifier>.Key: String]) throws -> Admin.ListConflicts.Reply {
        let database = try database(named: command.db)
        let store = database.store
        let rows = try store.conflictedDocumentIDs().map { id in
            let document = try store.get(id: id, options: .conflicts)
            return Admin.ConflictRow(
                doc: id, rev: document.revision, conflicts: document.conflicts ?? [], deletedConflicts: document.deletedConflicts ?? [],
                resolver: waiting[ResolverOffers.Key(database.name, id)])
        }
        return Admin.ListConflicts.Reply(conflicts: rows)
    }

    /// `resolve`: exactly one of `pick` (a leaf to keep), `body` (a merged body) or `delete: true`.
    func resolve(_ command: Admin.Resolve) throws -> Admin.Resolve.Reply {
        let database = try database(named: command.db)
        let id = command.doc
        let decision = try Self.decision(from: command.resolution, documentID: id)
        try checkApplicable(decision, to: id, in: database.store)
        let current = try database.store.resolveConflicts(id: id, resolver: ClosureResolver { _ in decision })
        events.emit(Admin.DocumentEvent(.conflictResolved, db: database.name.text, doc: id, rev: current, by: "manual"))
        // An offer outstanding for it is void now.
        queue.async { self.resolvers.forget(id, in: database.name) }
        return Admin.Resolve.Reply(doc: id, rev: current)
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

    /// The decision a resolution (of `resolve` or a resolver's answer) makes for `documentID`
    /// (nil when not known yet: an answer's ticket is checked after this).
    static func decision(from resolution: Admin.Resolution, documentID: String?) throws(AdminFailure) -> ResolutionDecision {
        try resolution.validate()
        if let pick = resolution.pick { return .keep(pick) }
        if resolution.delete == true { return .delete }
        return .merged(try DocumentMembers.resolutionBody(resolution.body ?? .null, documentID: documentID))
    }

    func changes(_ command: Admin.Changes) throws -> Admin.Changes.Reply {
        let store = try database(named: command.db).store
        let since = command.since ?? 0
        let page = try store.changesPage(since: since, limit: Int(command.limit ?? Int64(AgentLimits.changesDefaultLimit)))
        let rows = page.changes.map { change in
            Admin.ChangeRow(
                seq: change.sequence, doc: change.documentID,
                changes: change.leaves.filter { !$0.kind.isClosed }.map { Admin.ChangeRow.Leaf(rev: $0.revision) },
                deleted: change.deleted ? true : nil)
        }
        return Admin.Changes.Reply(results: rows, lastSeq: page.lastSequence ?? since)
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
            conflictedCount: Int64(counts.conflicted), awaitingAttachments: Int64(counts.awaitingContent), digest: counts.digest.hex)
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
