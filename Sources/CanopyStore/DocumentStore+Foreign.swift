import CanopyCore
import Logging

/// Inserting revisions received from peers (the replication hot path) and imports.
extension DocumentStore {
    /// Merges foreign revisions, with their ancestry and no new edits, into their documents' trees;
    /// then runs the node's `ConflictPolicy` on every document the batch touched. One transaction:
    /// if any revision is invalid (id, body, history, hash) the whole batch fails with
    /// `StoreError.invalidInput` naming the document, and nothing is written.
    ///
    /// Returns one result per document, in the order the documents first appear in `revisions`.
    @discardableResult
    public func bulkInsertForeign(
        _ revisions: [ForeignRevision], idCheck: RevisionIDCheck = .contentHash
    ) throws(StoreError) -> [ForeignDocumentResult] {
        guard revisions.count <= StoreLimits.foreignBatchCountMax else {
            throw .invalidInput(.batchTooLarge(count: revisions.count, limit: StoreLimits.foreignBatchCountMax))
        }
        let checked: [CheckedRevision]
        do {
            checked = try Self.checkAll(revisions, idCheck: idCheck)
        } catch {
            throw .invalidInput(error)
        }
        return try insertChecked(checked, fromPeer: false)
    }

    /// Writes a batch whose revisions `checkForeign` already checked, in one transaction, exactly
    /// as `bulkInsertForeign(_:idCheck:)` writes the revisions that pass: this lets a replicator
    /// check batch n + 1 off its serial queue while batch n is written. The documents the check
    /// rejected are not in `batch`; a problem only the merge finds (a history that contradicts the
    /// stored tree) fails the whole call with `StoreError.invalidInput`, and nothing is written.
    ///
    /// `local`, when given, is put in the same transaction: a replicator records its checkpoint
    /// with the batch that reaches it, so the checkpoint is never ahead of the data and costs no
    /// commit of its own. `policy`, when given, settles the conflicts the batch creates instead of
    /// the store's `conflictPolicy` (a replicator configured with its own resolver).
    @discardableResult
    package func bulkInsertForeign(
        checked batch: CheckedForeignBatch, local: LocalDocument? = nil, policy: ConflictPolicy? = nil
    ) throws(StoreError) -> [ForeignDocumentResult] {
        try insertChecked(batch.revisions, local: local, policy: policy, fromPeer: true)
    }

    /// `bulkInsertForeign(_:idCheck:)` for an import: with `keepingConflicts`, every conflict
    /// the revisions leave is kept as it came, whatever the store's policy (`ImportConflicts.keep`).
    func insertImported(_ revisions: [ForeignRevision], keepingConflicts: Bool) throws(StoreError) -> [ForeignDocumentResult] {
        guard keepingConflicts else { return try bulkInsertForeign(revisions, idCheck: .trusted) }
        guard revisions.count <= StoreLimits.foreignBatchCountMax else {
            throw .invalidInput(.batchTooLarge(count: revisions.count, limit: StoreLimits.foreignBatchCountMax))
        }
        let checked: [CheckedRevision]
        do {
            checked = try Self.checkAll(revisions, idCheck: .trusted)
        } catch {
            throw .invalidInput(error)
        }
        return try insertChecked(checked, policy: KeptImportedConflicts.policy, fromPeer: false, keepingConflicts: true)
    }

    /// The write of checked revisions shared by every entry point.
    private func insertChecked(
        _ checked: [CheckedRevision], local: LocalDocument? = nil, policy: ConflictPolicy? = nil, fromPeer: Bool,
        keepingConflicts: Bool = false
    ) throws(StoreError) -> [ForeignDocumentResult] {
        let (ready, awaiting) = try partitionAwaitingContent(checked, fromPeer: fromPeer)
        let groups = DocumentGroups(ready)
        let policy = policy ?? conflictPolicy
        let results = try write { context in
            let results = try Self.mergeAll(context, ready, groups, policy: policy, keepingConflicts: keepingConflicts)
            try Self.forgetSetAside(ready, context.db)
            if !awaiting.isEmpty { try Self.setAside(awaiting, context.db) }
            try local?.put(context.db)
            return results
        }
        if !awaiting.isEmpty { noteSetAside() }
        return results
    }

    /// A batch's revisions grouped by document, documents in first-appearance order (input order
    /// is deterministic). Built with one hash lookup per revision and no array per document: in
    /// the common batch every document appears once.
    struct DocumentGroups {
        /// Per document, the index in the batch of its first revision.
        private(set) var first: [Int] = []
        /// For documents with several revisions (by position in `first`), the indexes of the others.
        private(set) var others: [Int: [Int]] = [:]

        init(_ revisions: [CheckedRevision]) {
            var positions: [String: Int] = [:]
            positions.reserveCapacity(revisions.count)
            first.reserveCapacity(revisions.count)
            for (index, revision) in revisions.enumerated() {
                if let known = positions.updateValue(first.count, forKey: revision.documentID) {
                    positions[revision.documentID] = known
                    others[known, default: []].append(index)
                } else {
                    first.append(index)
                }
            }
        }

        /// The revisions of the document at `position`, in batch order.
        func revisions(at position: Int, of batch: [CheckedRevision]) -> [CheckedRevision] {
            [batch[first[position]]] + (others[position] ?? []).map { batch[$0] }
        }
    }

    /// Merges every document of a batch, in order: documents that receive one path are queued for
    /// `NewChainBatch` (which writes the new ones with multi-row statements); any other document
    /// first flushes the queue, so documents are written, and get their sequences, in order.
    /// `keepingConflicts`: an import that keeps the conflicts it leaves (`KeptImportedConflicts`).
    static func mergeAll(
        _ context: WriteContext, _ checked: [CheckedRevision], _ groups: DocumentGroups, policy: ConflictPolicy,
        keepingConflicts: Bool = false
    ) throws -> [ForeignDocumentResult] {
        var results = [ForeignDocumentResult?](repeating: nil, count: groups.first.count)
        var batch = NewChainBatch()
        let flush = { (batch: inout NewChainBatch) throws in
            try batch.flush(
                context,
                written: { item in results[item.slot] = RevisionRows.newChainResult(documentID: item.documentID, path: item.path) },
                oneByOne: { item, afterMiss in
                    let revisions = groups.revisions(at: item.slot, of: checked)
                    results[item.slot] = try mergeForeign(
                        context, documentID: item.documentID, revisions: revisions, policy: policy, updating: afterMiss)
                })
        }
        for (position, index) in groups.first.enumerated() {
            let revision = checked[index]
            if groups.others.isEmpty || groups.others[position] == nil {
                batch.append(.init(
                    slot: position, documentID: revision.documentID, path: revision.path, body: revision.body,
                    importedID: revision.importedID))
                continue
            }
            try flush(&batch)
            results[position] = try mergeForeign(
                context, documentID: revision.documentID, revisions: groups.revisions(at: position, of: checked), policy: policy)
        }
        try flush(&batch)
        let merged = results.map { $0! }
        try KeptImportedConflicts.record(merged, keeping: keepingConflicts, context)
        return merged
    }

    /// A foreign revision whose input checks passed, with its canonical body bytes.
    struct CheckedRevision: Sendable {
        let documentID: String
        let path: RevisionPath
        let body: [UInt8]
        /// The leaf's id is imported (not its content hash); stored marked so.
        let importedID: Bool
        /// The body has an `_attachments` member (whose content may not be here yet).
        var namesAttachments = false
    }

    /// Checks every revision of a batch, in parallel (the canonical-form check and the BLAKE2b
    /// hash are pure and are the larger part of a batch's CPU time outside SQLite).
    static func checkAll(_ revisions: [ForeignRevision], idCheck: RevisionIDCheck) throws(StoreInputError) -> [CheckedRevision] {
        try ParallelMap.map(revisions) { revision throws(StoreInputError) in
            try check(revision, idCheck: idCheck, revsLimit: StoreLimits.revsLimitMax)
        }
    }

    /// Checks one foreign revision before the transaction: id, body, history length, hash.
    static func check(_ revision: ForeignRevision, idCheck: RevisionIDCheck, revsLimit: Int) throws(StoreInputError) -> CheckedRevision {
        let id = revision.documentID
        try InputValidation.checkDocumentID(id)
        let body: [UInt8]
        switch revision.body {
        case .canonical(let bytes):
            try InputValidation.checkCanonicalBody(bytes, documentID: id)
            body = bytes
        case .value(let value):
            body = try InputValidation.canonicalBody(value, documentID: id)
        }
        guard revision.path.ancestors.count < revsLimit else {
            throw .invalidHistory(documentID: id, detail: "\(revision.path.ancestors.count) ancestors exceed the limit of \(revsLimit)")
        }
        // `_attachments` must be well formed; whether its content is here is decided when the
        // batch is written (`partitionAwaitingContent`).
        let namesAttachments = AttachmentCheck.names(body)
        if namesAttachments, idCheck != .trusted { try AttachmentCheck.checkShape(body, documentID: id) }
        // Imported ids are accepted unverified from an import, or from a peer that marked them;
        // an id that turns out to be its content's hash is stored as an ordinary one.
        let mayBeImported: Bool
        switch idCheck {
        case .contentHash: mayBeImported = revision.importedID
        case .trusted: mayBeImported = true
        }
        var imported = false
        if revision.path.leaf.generation > 1 && revision.path.parent == nil {
            // The hash covers the parent, so a revision past generation 1 must name it.
            guard mayBeImported else {
                throw .invalidHistory(documentID: id, detail: "revision \(revision.path.leaf) sent without its parent")
            }
            imported = true
        } else {
            let computed = RevisionHasher.revisionID(
                parent: revision.path.parent, kind: revision.path.kind, canonicalBody: body)
            if computed != revision.path.leaf {
                guard mayBeImported else {
                    throw .revisionHashMismatch(documentID: id, claimed: revision.path.leaf, computed: computed)
                }
                imported = true
            }
        }
        return CheckedRevision(
            documentID: id, path: revision.path, body: body, importedID: imported, namesAttachments: namesAttachments)
    }

    /// Merges one document's foreign revisions, applies the policy, stems, and writes. A document
    /// that receives one path is first tried as a new one (`insertNewChain`, an insert that does
    /// nothing when it exists) — unless the batch is `updating` documents, where it is looked up
    /// first and only an absent one is inserted so: in a batch of edits the failed insert cost as
    /// much as the lookup that follows it.
    private static func mergeForeign(
        _ context: WriteContext, documentID: String, revisions: [CheckedRevision], policy: ConflictPolicy,
        updating: Bool = false
    ) throws -> ForeignDocumentResult {
        let newChain = { () throws -> ForeignDocumentResult? in
            guard revisions.count == 1 else { return nil }
            return try RevisionRows.insertNewChain(
                context, documentID: documentID, path: revisions[0].path, body: revisions[0].body,
                importedID: revisions[0].importedID)
        }
        if !updating, let result = try newChain() { return result }
        let document = try RevisionRows.loadForWrite(context.db, documentID: documentID)
        if updating, document.key == nil, let result = try newChain() { return result }
        return try mergeForeign(context, document, revisions, policy: policy)
    }

    /// The general path: merges into the loaded tree, applies the policy, stems, and writes.
    private static func mergeForeign(
        _ context: WriteContext, _ loaded: StoredDocument, _ revisions: [CheckedRevision], policy: ConflictPolicy
    ) throws -> ForeignDocumentResult {
        var document = loaded
        let documentID = document.id
        let localRevision = document.tree.current?.id
        var added: [RevisionID] = []
        for revision in revisions {
            let outcome: RevTree.MergeOutcome
            do {
                outcome = try document.tree.merge(revision.path)
            } catch {
                throw StoreError.invalidInput(.invalidHistory(documentID: documentID, detail: error.description))
            }
            document.touched.append(contentsOf: revision.path.revisions)
            if let root = revision.path.revisions.last, let parent = document.tree.node(root)?.parent {
                document.touched.append(parent)
            }
            if outcome.added.contains(revision.path.leaf) {
                document.newBodies[revision.path.leaf] = revision.body
                if revision.importedID { document.importedIDs.append(revision.path.leaf) }
            }
            added.append(contentsOf: outcome.added)
        }
        let policyOutcome = try PolicyRunner.run(policy, context.db, &document, localRevision: localRevision)
        let resolution = policyOutcome.resolution
        added.append(contentsOf: policyOutcome.added)
        if case .failed(let reason) = resolution {
            context.logger.warning("conflict kept: resolver failed", metadata: ["document": "\(documentID.prefix(80))", "reason": "\(reason)"])
        }
        RevisionRows.stem(&document, context)
        // Touched with nothing new (a re-sent revision) still needs no write: compare first.
        if added.isEmpty && document.tree == document.storedTree { document.touched = [] }
        try RevisionRows.persist(context, &document)
        guard let current = document.tree.current else { throw StoreError.corrupt(detail: "empty tree after merge") }
        return ForeignDocumentResult(
            documentID: documentID, added: added, resolution: resolution,
            conflict: added.isEmpty ? nil : policyOutcome.conflict, current: current.id,
            currentIsDeleted: current.kind.isDeleted,
            settledByRevisions: loaded.wasConflicted && policyOutcome.conflict == nil && !added.isEmpty)
    }
}
