import CanopyCore
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

    /// `import`: `{"docs": [...], "couchdb": bool}`, a `_bulk_docs` body with `new_edits: false`.
    /// All revisions go in one store transaction: on any bad revision nothing is written.
    /// Revisions are inserted as if received from a peer, so the node's conflict policy applies.
    func importDocuments(_ request: AdminRequest) throws -> [String: JSONValue] {
        guard case .array(let docs)? = request.arguments["docs"] else {
            throw AdminFailure(.invalidArgument, "\"import\" needs \"docs\": an array of CouchDB documents")
        }
        guard docs.count <= AgentLimits.importDocumentsMax else {
            throw AdminFailure(.invalidArgument, "\(docs.count) documents exceed the limit of \(AgentLimits.importDocumentsMax) per request")
        }
        if let newEdits = request.arguments["new_edits"], newEdits != .bool(false) {
            throw AdminFailure(.invalidArgument, "only \"new_edits\": false is supported (revisions are imported as they are)")
        }
        // A `_local/` document never replicates (`DocumentMembers`); imported, it would.
        if let index = docs.firstIndex(where: { doc in
            if case .string(let id)? = doc.objectValue?["_id"] { return DocumentMembers.isLocal(id) }
            return false
        }) {
            throw AdminFailure(
                .invalidArgument, "entry \(index) is a _local/ document, which is not imported: local documents never replicate; write it with put")
        }
        let body = CanonicalJSON.encode(.object(["docs": .array(docs), "new_edits": .bool(false)]))
        let results = try store.importBulkDocs(body, couchDB: try request.bool("couchdb"))
        let added = results.reduce(0) { $0 + $1.added.count }
        emit("import.finished", ["documents": .int(Int64(results.count)), "revisions_added": .int(Int64(added))])
        return ["documents": .int(Int64(results.count)), "revisions_added": .int(Int64(added))]
    }

    /// `export`: one page of documents in change order, every leaf (closed ones included) with its
    /// stored history. `since`/`limit` page through; `last_seq` is the next `since`, and `done` is
    /// true on the last page.
    func exportDocuments(_ request: AdminRequest) throws -> [String: JSONValue] {
        let since = try request.optionalInt("since", in: 0...Int64.max) ?? 0
        let limit = try request.optionalInt("limit", in: 1...Int64(AgentLimits.changesLimitMax)) ?? Int64(AgentLimits.changesDefaultLimit)
        let changes = try store.changes(since: since, limit: Int(limit))
        var docs: [JSONValue] = []
        for change in changes {
            for leaf in change.leaves {
                if let document = try exportedRevision(change.documentID, leaf.revision) { docs.append(try Self.couchDocument(document)) }
            }
        }
        return [
            "docs": .array(docs), "last_seq": .int(changes.last?.sequence ?? since),
            "done": .bool(changes.count < Int(limit)),
        ]
    }

    /// One leaf with its history, or nil when its body was compacted away (nothing to export).
    private func exportedRevision(_ id: String, _ revision: RevisionID) throws(StoreError) -> Document? {
        do throws(StoreError) {
            return try store.get(id: id, rev: revision, options: .revisions)
        } catch {
            if case .bodyUnavailable = error { return nil }
            throw error
        }
    }
}
