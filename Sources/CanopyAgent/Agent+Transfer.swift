import CanopyCore
import CanopyStore
import Dispatch

/// `import` and `export` in CouchDB's JSON shape (see `CouchJSON`).
extension Agent {
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
        let couchDB = try request.bool("couchdb")
        var revisions: [CouchJSON.ImportedRevision] = []
        revisions.reserveCapacity(docs.count)
        for (index, doc) in docs.enumerated() { revisions.append(try CouchJSON.revision(from: doc, index: index)) }
        if couchDB { CouchJSON.settleCouchDBBranches(&revisions) }
        let foreign = revisions.map { ForeignRevision(documentID: $0.documentID, path: $0.path, body: .value($0.body)) }
        // CouchDB's ids are MD5-based, so only Canopy's own exports can pass the content-hash check.
        let results = try store.bulkInsertForeign(foreign, idCheck: couchDB ? .trusted : .contentHash)
        let added = results.reduce(0) { $0 + $1.added.count }
        emit("import.finished", ["documents": .int(Int64(results.count)), "revisions_added": .int(Int64(added))])
        return ["documents": .int(Int64(results.count)), "revisions_added": .int(Int64(added))]
    }

    /// `export`: one page of documents in change order, every leaf (closed ones included) with its
    /// full stored history. `since`/`limit` page through; `last_seq` is the next `since`, and
    /// `done` is true on the last page.
    func exportDocuments(_ request: AdminRequest) throws -> [String: JSONValue] {
        let since = try request.optionalInt("since", in: 0...Int64.max) ?? 0
        let limit = try request.optionalInt("limit", in: 1...Int64(AgentLimits.changesLimitMax)) ?? Int64(AgentLimits.changesDefaultLimit)
        let changes = try store.changes(since: since, limit: Int(limit))
        var docs: [JSONValue] = []
        for change in changes {
            for leaf in change.leaves {
                if let document = try exportedRevision(change.documentID, leaf.revision) { docs.append(CouchJSON.document(document)) }
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
