import CanopyCore
import Foundation

/// Export and import in CouchDB's JSON shape (`CouchJSON`).
///
/// Imported revision ids are taken as given: ids from CouchDB (MD5 over Erlang terms) or PouchDB
/// can never match Canopy's content hash, so such a revision is stored marked as imported and
/// peers accept it without the hash check (`ForeignRevision.importedID`). An imported tree
/// therefore replicates to Canopy peers as it is, but a Canopy node that makes the same edit as
/// CouchDB did produces a different id.
extension DocumentStore {
    /// The current revision of `id` in CouchDB shape, with `_revisions` and `_conflicts`.
    public func exportCouchDocument(id: String) throws(StoreError) -> JSONValue {
        let document = try get(id: id, options: [.revisions, .conflicts])
        let history = document.history ?? [document.revision]
        let path: RevisionPath
        do { path = try RevisionPath(leaf: document.revision, kind: document.kind, ancestors: Array(history.dropFirst())) } catch {
            throw .corrupt(detail: "stored history of \"\(id.prefix(80))\": \(error)")
        }
        return CouchJSON.export(documentID: id, path: path, body: document.body, conflicts: document.conflicts)
    }

    /// Every leaf of every document (open and closed), in changes order, as a `_bulk_docs` body
    /// with `"new_edits": false`: importing it elsewhere rebuilds the same trees (up to
    /// `revsLimit` deep) with the same revision ids and kinds.
    public func exportBulkDocs() throws(StoreError) -> [UInt8] {
        let limit = revsLimit
        let docs = try read { db -> [JSONValue] in
            let ids = try readableIDs(db, "SELECT doc_id FROM documents ORDER BY sequence")
            var docs: [JSONValue] = []
            for id in ids {
                guard let document = try RevisionRows.load(db, documentID: id) else { continue }
                for leaf in document.tree.leaves {
                    guard let bytes = try RevisionRows.body(db, of: document, revision: leaf.id) else {
                        throw StoreError.bodyUnavailable(documentID: id, revision: leaf.id)
                    }
                    let body = try InputValidation.storedBody(bytes, documentID: id)
                    let ancestry = document.tree.ancestry(of: leaf.id, limit: limit)
                    let path = try RevisionPath(leaf: leaf.id, kind: leaf.kind, ancestors: Array(ancestry.dropFirst()))
                    docs.append(CouchJSON.export(documentID: id, path: path, body: body))
                }
            }
            return docs
        }
        return CanonicalJSON.encode(.object(["docs": .array(docs), "new_edits": .bool(false)]))
    }

    /// Imports a `_bulk_docs` body with `"new_edits": false`: every entry is a revision with its
    /// history, inserted as received from a peer (ids not hash-verified, see above), then the
    /// node's conflict policy runs, unless the import keeps its conflicts (`conflicts`, below).
    /// One transaction: a bad entry fails the whole import.
    ///
    /// `couchDB: true` is for data that came from CouchDB or Cloudant, which end a losing branch
    /// with an ordinary deletion: a deleted leaf that is not CouchDB's winner among the document's
    /// imported leaves is imported as a closing tombstone. Without it, such a deletion is a user's
    /// deletion and deletes-win applies (`Protocol/design.md` §3.6).
    ///
    /// `conflicts` says what becomes of the conflicts the revisions leave (nil: `.keep` with
    /// `couchDB`, `.settle` without): kept as they came, so a CouchDB document reads as CouchDB
    /// showed it, `_conflicts` included, or settled by the policy as a peer's would be.
    @discardableResult
    public func importBulkDocs(
        _ bytes: some Collection<UInt8>, couchDB: Bool = false, conflicts: ImportConflicts? = nil
    ) throws(StoreError) -> [ForeignDocumentResult] {
        let imported: [CouchJSON.ImportedRevision]
        do {
            imported = try Self.parseBulkDocs(bytes)
        } catch {
            throw .invalidInput(error)
        }
        return try importRevisions(imported, couchDB: couchDB, conflicts: conflicts)
    }

    /// `importBulkDocs` for entries already parsed (the `docs` array of a `_bulk_docs` body, as
    /// the admin socket receives them): the same checks and conflicts, one transaction.
    @discardableResult
    public func importCouchDocuments(
        _ docs: [JSONValue], couchDB: Bool = false, conflicts: ImportConflicts? = nil
    ) throws(StoreError) -> [ForeignDocumentResult] {
        guard docs.count <= StoreLimits.foreignBatchCountMax else {
            throw .invalidInput(.batchTooLarge(count: docs.count, limit: StoreLimits.foreignBatchCountMax))
        }
        let imported: [CouchJSON.ImportedRevision]
        do {
            imported = try docs.map { doc throws(StoreInputError) in try CouchJSON.importRevision(doc) }
        } catch {
            throw .invalidInput(error)
        }
        return try importRevisions(imported, couchDB: couchDB, conflicts: conflicts)
    }

    /// Inserts imported revisions as from a peer. Their `_attachments` must be well formed and name
    /// content this node holds (an import stores inline content before this).
    /// Inline attachment content is stored first and pinned until the revisions naming it are
    /// written; every `_attachments` must then be well formed and name content this node holds.
    private func importRevisions(
        _ parsed: [CouchJSON.ImportedRevision], couchDB: Bool, conflicts: ImportConflicts?
    ) throws(StoreError) -> [ForeignDocumentResult] {
        let (imported, pins) = try storingInlineAttachments(parsed)
        let revisions = (couchDB ? Self.closingCouchLosers(imported) : imported).map { revision in
            ForeignRevision(documentID: revision.documentID, path: revision.path, body: .value(revision.body))
        }
        do {
            try AttachmentCheck.check(
                imported.map { LocalWrite(documentID: $0.documentID, body: $0.body, replacing: nil) }, against: attachments,
                missing: ", and an import stores only content given inline as `data` (export with `canopyctl export --attachments`, or from CouchDB with attachments=true)")
        } catch {
            throw .invalidInput(error)
        }
        let keeping = (conflicts ?? (couchDB ? .keep : .settle)) == .keep
        return try withExtendedLifetime(pins) { () throws(StoreError) in try insertImported(revisions, keepingConflicts: keeping) }
    }

    /// Parses a `_bulk_docs` body after checking its size; only `"new_edits": false` is accepted.
    static func parseBulkDocs(_ bytes: some Collection<UInt8>) throws(StoreInputError) -> [CouchJSON.ImportedRevision] {
        guard bytes.count <= StoreLimits.bulkDocsBytesMax else {
            throw .bodyTooLarge(documentID: nil, bytes: bytes.count, limit: StoreLimits.bulkDocsBytesMax)
        }
        let value: JSONValue
        do { value = try JSONValue.parseInput(Data(bytes)) } catch { throw .invalidJSON(documentID: nil, detail: error.description) }
        guard case .object(let members) = value, case .array(let docs)? = members["docs"] else {
            throw .invalidCouchDocument(documentID: nil, detail: "a _bulk_docs body is {\"docs\": […], \"new_edits\": false}")
        }
        guard members["new_edits"] == .bool(false) else {
            throw .invalidCouchDocument(documentID: nil, detail: "only \"new_edits\": false is supported (revisions as received)")
        }
        guard docs.count <= StoreLimits.foreignBatchCountMax else {
            throw .batchTooLarge(count: docs.count, limit: StoreLimits.foreignBatchCountMax)
        }
        return try docs.map { doc throws(StoreInputError) in try CouchJSON.importRevision(doc) }
    }

    /// Rewrites, per document, every deleted leaf that is not CouchDB's winner (non-deleted first,
    /// then higher generation, then higher digest) as a closing tombstone. Entries that are
    /// ancestors of other entries are not leaves and are left alone.
    static func closingCouchLosers(_ revisions: [CouchJSON.ImportedRevision]) -> [CouchJSON.ImportedRevision] {
        var byDocument: [String: [Int]] = [:]
        for (index, revision) in revisions.enumerated() { byDocument[revision.documentID, default: []].append(index) }
        var result = revisions
        for indices in byDocument.values {
            let ancestors = Set(indices.flatMap { revisions[$0].path.ancestors })
            let leaves = indices.filter { !ancestors.contains(revisions[$0].path.leaf) }
            let nodes = leaves.map { RevTree.Node(id: revisions[$0].path.leaf, parent: nil, kind: revisions[$0].path.kind) }
            guard let winner = nodes.sorted(by: RevTree.canonicalOrder).first else { continue }
            for index in leaves {
                let revision = revisions[index]
                guard revision.path.leaf != winner.id, revision.path.kind == .deleted,
                    let path = try? RevisionPath(leaf: revision.path.leaf, kind: .closed, ancestors: revision.path.ancestors,
                                                  rootParent: revision.path.rootParent)
                else { continue }
                result[index] = CouchJSON.ImportedRevision(documentID: revision.documentID, path: path, body: revision.body)
            }
        }
        return result
    }
}
