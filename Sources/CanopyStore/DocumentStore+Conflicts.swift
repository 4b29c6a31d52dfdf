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

    /// Resolves the conflict of `id` with `resolver`: the resolver sees every open leaf (with
    /// bodies, canonical order), deleted ones included and marked (`ConflictLeaf.isDeleted`), as
    /// a policy's resolver and the agent's resolver clients see them, so that an edit against a
    /// deletion reaches it as two leaves; its decision is written as a child of the winning leaf
    /// and every other conflicting leaf is closed, in one transaction.
    /// Returns the new current revision. Throws `handlerFailed` when the resolver throws or decides
    /// something impossible (nothing is written then), `notFound` for an unknown document.
    @discardableResult
    public func resolveConflicts(id: String, resolver: any ConflictResolver) throws(StoreError) -> RevisionID {
        try write { context in
            guard var document = try RevisionRows.load(context.db, documentID: id) else {
                throw StoreError.notFound(documentID: id, revision: nil)
            }
            if document.tree.isConflicted {
                do {
                    _ = try PolicyRunner.resolve(
                        with: resolver, context.db, &document, leaves: document.tree.conflictingLeaves,
                        localRevision: document.tree.current?.id)
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

    /// The retry pass: runs the node's policy (or `policy`, when given) again over every
    /// still-conflicted document (a resolver that failed before, or a policy changed since), in
    /// one transaction, except the conflicts an import kept as they came (`ImportConflicts.keep`),
    /// which wait for `resolveConflicts`. Under the manual policy nothing changes. Returns one result per
    /// conflicted document, sorted by id; each carries the conflict as found (`conflict`), and a
    /// document whose rule names a resolver the store does not hold comes back `.awaiting`.
    public func retryConflictResolution(policy: ConflictPolicy? = nil) throws(StoreError) -> [ForeignDocumentResult] {
        let policy = policy ?? conflictPolicy
        // Nothing conflicted (the usual case at start-up): no write transaction, whose commit
        // could also set off a checkpoint of everything written before.
        guard try read({ db in try db.queryFirst(KeptImportedConflicts.anyRetriedSQL) { _ in true } }) != nil else {
            return []
        }
        return try write { context in
            let ids = try readableIDs(context.db, KeptImportedConflicts.retriedSQL)
            return try ids.map { id in
                var document = try RevisionRows.loadForWrite(context.db, documentID: id)
                let outcome = try PolicyRunner.run(policy, context.db, &document, localRevision: nil)
                RevisionRows.stem(&document, context)
                try RevisionRows.persist(context, &document)
                guard let current = document.tree.current else { throw StoreError.corrupt(detail: "empty tree") }
                return ForeignDocumentResult(
                    documentID: id, added: outcome.added, resolution: outcome.resolution, conflict: outcome.conflict,
                    current: current.id, currentIsDeleted: current.kind.isDeleted)
            }
        }
    }
}

/// Conflicts in batches, for a resolver outside the process: describing many in one read, and
/// applying many answers in one transaction.
extension DocumentStore {
    /// The conflicts of `ids` as a resolver sees them (every open leaf with its body, deleted ones
    /// included; the common ancestor's body when the store holds it), in one read. A document that
    /// is missing, damaged or no longer conflicted is left out.
    public func conflicts(ids: [String]) throws(StoreError) -> [Conflict] {
        try readBatch { db in
            try ids.compactMap { id -> Conflict? in
                guard let document = try RevisionRows.load(db, documentID: id), document.tree.isConflicted else { return nil }
                return try PolicyRunner.describe(db, document, leaves: document.tree.conflictingLeaves, localRevision: nil).0
            }
        }
    }

    /// Applies resolvers' decisions, one per document, in one transaction: each is written as
    /// `resolveConflicts(id:resolver:)` writes it (the same content-addressed revisions), and a
    /// decision that cannot apply (the document is gone or no longer conflicted, a `keep` naming a
    /// revision that is not an open leaf) fails alone with nothing of it written. Returns, in
    /// order, each document's new current revision or its error.
    public func applyResolutions(_ decisions: [(id: String, decision: ResolutionDecision)]) throws(StoreError) -> [Result<RevisionID, StoreError>] {
        try write { context in
            try decisions.map { entry -> Result<RevisionID, StoreError> in
                guard var document = try RevisionRows.load(context.db, documentID: entry.id) else {
                    return .failure(.notFound(documentID: entry.id, revision: nil))
                }
                guard document.tree.isConflicted else {
                    return .failure(.handlerFailed(documentID: entry.id, underlying: ConflictResolution.PlanError.notConflicted))
                }
                do {
                    _ = try PolicyRunner.apply(entry.decision, &document, conflicting: document.tree.conflictingLeaves, context.db)
                } catch let error as ConflictResolution.PlanError {
                    return .failure(.handlerFailed(documentID: entry.id, underlying: error))
                }
                RevisionRows.stem(&document, context)
                try RevisionRows.persist(context, &document)
                guard let current = document.tree.current else { throw StoreError.corrupt(detail: "empty tree") }
                return .success(current.id)
            }
        }
    }
}

/// A stale local write kept as a branch, for the documents a rule covers.
extension DocumentStore {
    /// Writes `body` (nil: a deletion) as a new child of `parent`, a revision of `id` that is no
    /// longer current: the write a `put` naming a stale revision would have made, kept beside the
    /// current one instead of refused. The document is then conflicted, and the conflict policy
    /// settles it (or keeps it, or leaves it for a resolver) exactly as when a peer's revision makes
    /// the same conflict. Returns the new revision's id and the result, whose `current` is the
    /// revision current after the policy acted. Throws `notFound` when the tree does not hold
    /// `parent` (stemmed away, or never part of it).
    public func putBranch(id: String, body: JSONValue?, parent: RevisionID) throws(StoreError) -> (revision: RevisionID, result: ForeignDocumentResult) {
        guard let tree = try revisionTree(id: id), tree.node(parent) != nil else {
            throw StoreError.notFound(documentID: id, revision: parent)
        }
        let kind: RevisionKind = body == nil ? .deleted : .live
        let content = body ?? .emptyObject
        let bytes: [UInt8]
        do { bytes = try InputValidation.canonicalBody(content, documentID: id) } catch { throw .invalidInput(error) }
        let leaf = RevisionHasher.revisionID(parent: parent, kind: kind, body: content)
        let path: RevisionPath
        do { path = try RevisionPath(leaf: leaf, kind: kind, ancestors: tree.ancestry(of: parent)) } catch {
            throw StoreError.corrupt(detail: "the stored history of \"\(id.prefix(80))\" is not a chain: \(error)")
        }
        let revision = ForeignRevision(documentID: id, path: path, body: .canonical(bytes))
        return (leaf, try bulkInsertForeign([revision])[0])
    }
}
