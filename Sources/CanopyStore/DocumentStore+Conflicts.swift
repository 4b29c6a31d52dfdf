import CanopyCore

/// Conflicts kept in the store: listing them, resolving one by hand, and the retry pass.
extension DocumentStore {
    /// Ids of documents flagged conflicted, sorted by UTF-8 bytes (SQLite's text order); a damaged
    /// id is left out and reported (`StoredDamage`).
    public func conflictedDocumentIDs() throws(StoreError) -> [String] {
        try read { db in
            try readableIDs(db, "SELECT doc_id FROM documents WHERE conflicted = 1 ORDER BY doc_id")
        }
    }

    /// Resolves the conflict of `id` with `resolver`, Cloudant style: the resolver sees all open
    /// non-deleted leaves (with bodies, canonical order); its decision is written as a child of
    /// the winning leaf and every other conflicting leaf is closed, in one transaction.
    /// Returns the new current revision. Throws `handlerFailed` when the resolver throws or decides
    /// something impossible (nothing is written then), `notFound` for an unknown document.
    @discardableResult
    public func resolveConflicts(id: String, resolver: any ConflictResolver) throws(StoreError) -> RevisionID {
        try write { context in
            guard var document = try RevisionRows.load(context.db, documentID: id) else {
                throw StoreError.notFound(documentID: id, revision: nil)
            }
            if document.tree.isConflicted {
                let live = document.tree.conflictingLeaves.filter { !$0.kind.isDeleted }
                do {
                    _ = try PolicyRunner.resolve(
                        with: resolver, context.db, &document, leaves: live, localRevision: document.tree.current?.id)
                } catch let failure as PolicyRunner.ResolverFailure {
                    throw StoreError.handlerFailed(documentID: id, underlying: failure)
                }
                RevisionRows.stem(&document, context)
                try RevisionRows.persist(context, &document)
            }
            guard let current = document.tree.current else { throw StoreError.notFound(documentID: id, revision: nil) }
            return current.id
        }
    }

    /// The retry pass: runs the node's policy again over every still-conflicted document (a
    /// resolver that failed before, or a policy changed since), in one transaction. Under the
    /// manual policy nothing changes. Returns one result per conflicted document, sorted by id.
    public func retryConflictResolution() throws(StoreError) -> [ForeignDocumentResult] {
        let policy = configuration.conflictPolicy
        return try write { context in
            let ids = try readableIDs(context.db, "SELECT doc_id FROM documents WHERE conflicted = 1 ORDER BY doc_id")
            return try ids.map { id in
                var document = try RevisionRows.loadForWrite(context.db, documentID: id)
                let (resolution, added) = try PolicyRunner.run(policy, context.db, &document, localRevision: nil)
                RevisionRows.stem(&document, context)
                try RevisionRows.persist(context, &document)
                guard let current = document.tree.current else { throw StoreError.corrupt(detail: "empty tree") }
                return ForeignDocumentResult(
                    documentID: id, added: added, resolution: resolution, current: current.id,
                    currentIsDeleted: current.kind.isDeleted)
            }
        }
    }
}
