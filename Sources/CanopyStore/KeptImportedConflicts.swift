import CanopyCore

/// What an import of revisions as they are (`importBulkDocs`, `importCouchDocuments`) does with
/// the conflicts among the revisions it brings. The raw values are the admin `import` command's.
public enum ImportConflicts: String, Codable, Sendable, Equatable, CaseIterable {
    /// The store's conflict policy settles them as it settles a peer's revisions: under
    /// `.automatic` a deletion beside a live leaf wins, the other leaves are closed.
    case settle
    /// They are kept as they came, whatever the policy — as CouchDB's own replicator keeps the
    /// conflicts it copies — so a CouchDB document reads with the `_conflicts` CouchDB showed: listed
    /// with the other kept conflicts (`conflictedDocumentIDs`), left alone by the retry pass
    /// (`retryConflictResolution`, also when a store opens), until it is resolved
    /// (`resolveConflicts`, `applyResolutions`) or revisions that arrive later for the document
    /// (a peer's, another import's) make the policy decide it again.
    case keep
}

/// The documents whose conflict an import kept as it came (`ImportConflicts.keep`): one row per
/// document in `kept_imported_conflicts` (schema version 7), which only the retry pass reads.
///
/// A row lives while the conflict it kept does: it is written with the import, and removed when
/// the document's conflict ends (any write that leaves it unconflicted, `RevisionRows.persist`)
/// or when revisions that arrive later leave it conflicted under the policy's decision (a batch
/// merged by `DocumentStore.mergeAll` with the policy). Local edits of one of its leaves keep it.
enum KeptImportedConflicts {
    /// The policy an import that keeps its conflicts runs: every conflict kept, reported as kept
    /// by the rule `import` (its `conflict.detected` says so) rather than the store's catch-all.
    static let policy = ConflictPolicy.rules(ResolutionRules([ResolutionRule(name: "import", strategy: .manual)], fallback: .manual))

    /// The conflicted documents the retry pass runs the policy over: those no import kept.
    static let retriedSQL = """
        SELECT doc_id FROM documents WHERE conflicted = 1
            AND doc_id NOT IN (SELECT doc_id FROM kept_imported_conflicts) ORDER BY doc_id
        """
    /// Whether the retry pass has anything to do, without a write transaction.
    static let anyRetriedSQL = """
        SELECT 1 FROM documents WHERE conflicted = 1
            AND doc_id NOT IN (SELECT doc_id FROM kept_imported_conflicts) LIMIT 1
        """

    /// Takes note of a merged batch: with `keeping` (an import that keeps its conflicts), every
    /// document it left conflicted is kept; otherwise a kept document that received revisions and
    /// is conflicted still is the policy's again (it ran on it in this batch).
    static func record(_ results: [ForeignDocumentResult], keeping: Bool, _ context: WriteContext) throws {
        if keeping {
            for result in results where result.conflict != nil && result.resolution == .kept {
                try context.db.run("INSERT OR IGNORE INTO kept_imported_conflicts(doc_id) VALUES (?)", .text(result.documentID))
                context.keptImportedConflictsExist = true
            }
            return
        }
        // The common case, a batch with no conflict, costs nothing; one with conflicts, one query
        // per transaction while the table is empty.
        guard results.contains(where: { $0.conflict != nil }), try exist(context) else { return }
        for result in results where result.conflict != nil {
            try context.db.run("DELETE FROM kept_imported_conflicts WHERE doc_id = ?", .text(result.documentID))
        }
    }

    /// The conflict of `documentID` ended: no import keeps it any more.
    static func forget(_ documentID: String, _ context: WriteContext) throws {
        guard try exist(context) else { return }
        try context.db.run("DELETE FROM kept_imported_conflicts WHERE doc_id = ?", .text(documentID))
    }

    /// Whether any row exists, asked once per transaction (rows are only added through `record`,
    /// which says so).
    private static func exist(_ context: WriteContext) throws -> Bool {
        if let known = context.keptImportedConflictsExist { return known }
        let found = try context.db.queryFirst("SELECT 1 FROM kept_imported_conflicts LIMIT 1") { _ in true } != nil
        context.keptImportedConflictsExist = found
        return found
    }
}
