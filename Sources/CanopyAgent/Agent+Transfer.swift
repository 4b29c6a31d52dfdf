import CanopyAdmin
import CanopyCore
import CanopyReplication
import CanopyStore
import Dispatch

/// `get`'s document shape, `import` and `export`: CouchDB's JSON shape as CanopyStore's
/// `CouchJSON` defines it (with its `_closed`/`_resolved` extensions).
extension Agent {
    /// A revision in CouchDB shape; `_revisions` only when the history was asked for.
    static func couchDocument(_ document: Document) throws(StoreError) -> JSONValue {
        let history = document.history ?? [document.revision]
        let path: RevisionPath
        do {
            path = try RevisionPath(leaf: document.revision, kind: document.kind, ancestors: Array(history.dropFirst()))
        } catch {
            throw .corrupt(detail: "stored history of \"\(document.id.prefix(80))\": \(error)")
        }
        var members = CouchJSON.export(documentID: document.id, path: path, body: document.body, conflicts: document.conflicts).objectValue ?? [:]
        if document.history == nil { members["_revisions"] = nil }
        if let deleted = document.deletedConflicts, !deleted.isEmpty {
            members["_deleted_conflicts"] = .array(deleted.map { .string($0.description) })
        }
        return .object(members)
    }

    /// `import` (`Admin.ImportDocuments`): a `_bulk_docs` body with `new_edits: false`. All
    /// revisions go in one store transaction: on any bad revision nothing is written. Revisions
    /// are inserted as if received from a peer; the conflicts they leave are settled by the
    /// node's policy, or kept as they came (the default with `couchdb`, as CouchDB's replicator
    /// keeps them: `ImportConflicts`).
    func importDocuments(_ command: Admin.ImportDocuments) throws -> Admin.ImportDocuments.Reply {
        dispatchPrecondition(condition: .onQueue(storeQueue))
        let database = try database(named: command.db)
        let docs = command.docs ?? []
        try Self.checkBatchSize(docs)
        // A `_local/` document never replicates (`DocumentMembers`); imported, it would.
        if let index = docs.firstIndex(where: { doc in
            if case .string(let id)? = doc.objectValue?["_id"] { return DocumentMembers.isLocal(id) }
            return false
        }) {
            throw AdminFailure(
                .invalidArgument, "entry \(index) is a _local/ document, which is not imported: local documents never replicate; write it with put")
        }
        let couchDB = command.couchdb ?? false
        let conflicts = command.conflicts ?? (couchDB ? .keep : .settle)
        let results = try database.store.importCouchDocuments(docs, couchDB: couchDB, conflicts: conflicts)
        events.emit(documentEvents: results.flatMap { DocumentEvent.conflictEvents(for: $0, arrivedBy: "import") }, peer: "", database: database.name)
        let added = results.reduce(0) { $0 + $1.added.count }
        events.emit(Admin.ImportFinished(db: database.name.text, documents: Int64(results.count), revisionsAdded: Int64(added)))
        return Admin.ImportDocuments.Reply(documents: Int64(results.count), revisionsAdded: Int64(added))
    }

    /// At most `AgentLimits.importDocumentsMax` documents a request.
    private static func checkBatchSize(_ docs: [JSONValue]) throws(AdminFailure) {
        guard docs.count <= AgentLimits.importDocumentsMax else {
            throw AdminFailure(.invalidArgument, "\(docs.count) documents exceed the limit of \(AgentLimits.importDocumentsMax) per request")
        }
    }

    /// `bulk_docs` (`Admin.BulkDocuments`): CouchDB's `_bulk_docs` with `new_edits` true (the
    /// default): each entry is a new revision of its `_id` — replacing `_rev` when given,
    /// deleting with `_deleted: true` — written in one transaction, each on its own: a stale one
    /// gets `{"id", "error": "conflict", "reason"}` in `results` and the others are written
    /// (`{"id", "rev"}`). With `new_edits: false` it is `import`. Invalid entries fail the
    /// request before anything is written, naming the entry's index.
    func bulkDocuments(_ command: Admin.BulkDocuments) throws -> Admin.BulkDocuments.Reply {
        dispatchPrecondition(condition: .onQueue(storeQueue))
        if let asImport = command.asImport {
            try asImport.validate()
            return .imported(try importDocuments(asImport))
        }
        let database = try database(named: command.db)
        let docs = command.docs ?? []
        try Self.checkBatchSize(docs)
        var writes: [LocalWrite] = []
        writes.reserveCapacity(docs.count)
        for (index, doc) in docs.enumerated() {
            writes.append(try Self.bulkWrite(doc, index: index))
        }
        let results = try database.store.putBulk(writes)
        var rows: [Admin.BulkDocuments.Reply.Row] = []
        rows.reserveCapacity(results.count)
        var changed: [AgentEvent.Content] = []
        changed.reserveCapacity(results.count)
        var conflicts: Int64 = 0
        for (write, result) in zip(writes, results) {
            switch result {
            case .written(let revision):
                rows.append(.init(id: write.documentID, rev: revision))
                changed.append(.agentDocument(.localChange(db: database.name.text, doc: write.documentID, rev: revision, deleted: write.body == nil)))
            case .conflict(let current):
                conflicts += 1
                let reason = "\(write.replacing.map { "\($0)" } ?? "no _rev") is not the current revision ("
                    + (current.map { "\($0)" } ?? "the document does not exist") + ")"
                rows.append(.init(id: write.documentID, error: "conflict", reason: reason))
            }
        }
        events.emit(batch: changed)
        return .written(.init(results: rows, written: Int64(results.count) - conflicts, conflicts: conflicts))
    }

    /// One `bulk_docs` entry as a local write: `_id` (required), `_rev` (the revision replaced),
    /// `_deleted: true` (a deletion, which needs `_rev`); the rest is the body, checked as `put`
    /// checks it.
    private static func bulkWrite(_ doc: JSONValue, index: Int) throws(AdminFailure) -> LocalWrite {
        guard case .object(var members) = doc else { throw AdminFailure(.invalidArgument, "docs[\(index)] is not a JSON object") }
        guard case .string(let id)? = members["_id"], !id.isEmpty else {
            throw AdminFailure(.invalidArgument, "docs[\(index)] has no \"_id\" string")
        }
        var deleted = false
        if let flag = members.removeValue(forKey: "_deleted") {
            guard case .bool(let value) = flag else { throw AdminFailure(.invalidArgument, "docs[\(index)] \"_deleted\" must be true or false") }
            deleted = value
        }
        let checked: DocumentMembers
        do { checked = try DocumentMembers(body: .object(members), documentID: id, rev: nil) } catch {
            throw AdminFailure(error.code, "docs[\(index)] (\"\(id.prefix(80))\"): \(error.message)")
        }
        if deleted && checked.replacing == nil {
            throw AdminFailure(.invalidArgument, "docs[\(index)] (\"\(id.prefix(80))\"): a deletion needs the _rev it deletes")
        }
        return LocalWrite(documentID: id, body: deleted ? nil : checked.body, replacing: checked.replacing)
    }

    /// `export` (`Admin.ExportDocuments`): one page of documents in change order, every leaf
    /// (closed ones included) with its stored history. A page holds at most `limit` documents
    /// and, past its first leaf, at most `AgentLimits.exportPageBytesMax` bytes: a heavily edited
    /// document (hundreds of leaves, each with its body) is split across pages by leaf, so no
    /// reply outgrows what a client can be sent. `last_seq` is the sequence of the last document
    /// exported whole (the next `since`); when the page ends inside a document, `next_leaf` says
    /// how many of that document's leaves were sent (the next request passes it as
    /// `skip_leaves`). `done` is true on the last page. With `attachments: true`, each
    /// attachment's content is inline (base64 `data`), as CouchDB exports with
    /// `attachments=true`.
    func exportDocuments(_ command: Admin.ExportDocuments) throws -> Admin.ExportDocuments.Reply {
        dispatchPrecondition(condition: .onQueue(storeQueue))
        let store = try database(named: command.db).store
        let since = command.since ?? 0
        let limit = command.limit ?? Int64(AgentLimits.changesDefaultLimit)
        var skip = Int(command.skipLeaves ?? 0)
        let inline = command.attachments ?? false
        let page = try store.changesPage(since: since, limit: Int(limit))
        var docs: [JSONValue] = []
        var bytes = 0
        var lastWhole = since
        var damaged = page.damaged
        for change in page.changes {
            for (index, leaf) in change.leaves.enumerated() where index >= skip {
                guard let document = try exportedRevision(change.documentID, leaf.revision, store, damaged: &damaged) else { continue }
                let stubbed = try Self.couchDocument(document)
                let exported = inline ? try store.inliningAttachments(stubbed) : stubbed
                let size = CanonicalJSON.encode(exported).count + 1
                if !docs.isEmpty && bytes + size > AgentLimits.exportPageBytesMax {
                    // Full: the rest of this document (from `index`) goes on the next page.
                    return Admin.ExportDocuments.Reply(
                        docs: docs, lastSeq: lastWhole, done: false, nextLeaf: index > 0 ? Int64(index) : nil,
                        damaged: Self.damageRows(damaged))
                }
                docs.append(exported)
                bytes += size
            }
            skip = 0
            lastWhole = change.sequence
        }
        // Damaged rows the page passed over (reported by the store) count as exported; the reply
        // names them.
        return Admin.ExportDocuments.Reply(
            docs: docs, lastSeq: page.lastSequence ?? lastWhole, done: page.reachedEnd, damaged: Self.damageRows(damaged))
    }

    /// One leaf with its history, or nil when its body was compacted away or it is damaged
    /// (appended to `damaged`): nothing to export.
    private func exportedRevision(
        _ id: String, _ revision: RevisionID, _ store: DocumentStore, damaged: inout [StoredDamage]
    ) throws(StoreError) -> Document? {
        do throws(StoreError) {
            return try store.get(id: id, rev: revision, options: .revisions)
        } catch {
            switch error {
            case .bodyUnavailable: return nil
            // Reported by the store (event, status, log); the export goes on with the rest.
            case .damaged(let damage):
                damaged.append(damage)
                return nil
            // The row lists a leaf its revisions do not hold, or revision rows that cannot be
            // read: damage too, reported here since the read did not.
            case .notFound, .corrupt:
                let damage = StoredDamage(
                    documentID: id, revision: revision, reason: "its row lists this leaf, which its revisions cannot give (\(error))")
                store.reportDamage(damage)
                damaged.append(damage)
                return nil
            default: throw error
            }
        }
    }

    /// `damaged` rows of a reply, with `db` when `database` is given.
    static func damageRows(_ damaged: [StoredDamage], database: DatabaseName? = nil) -> [Admin.DamageRow] {
        damaged.map { Admin.DamageRow(db: database?.text, doc: $0.documentID, rev: $0.revision, reason: $0.reason) }
    }
}
