import CanopyCore

/// Local edits: put, delete and batches of them, with optimistic concurrency (`Protocol/design.md` §3.7).
extension DocumentStore {
    /// Writes `body` as a new revision of `id`, replacing `replacing`, and returns its id.
    ///
    /// `replacing` must be an open leaf of the document: the current revision, or the leaf of a
    /// conflicting branch (writing on a branch is how an application settles a conflict by hand).
    /// `nil` creates the document, or re-creates a deleted one as a child of its tombstone
    /// (PouchDB's rule, so the deletion is not lost on peers). Anything else is stale and is
    /// handled by `concurrency`.
    @discardableResult
    public func put(
        id: String, body: JSONValue, replacing: RevisionID?, concurrency: WriteConcurrency = .failOnConflict
    ) throws(StoreError) -> RevisionID {
        try putBatch([LocalWrite(documentID: id, body: body, replacing: replacing)], concurrency: concurrency)[0]
    }

    /// Deletes `id` by writing a user deletion (kind `.deleted`, body `{}`) replacing `rev`.
    @discardableResult
    public func delete(
        id: String, rev: RevisionID, concurrency: WriteConcurrency = .failOnConflict
    ) throws(StoreError) -> RevisionID {
        try putBatch([LocalWrite(documentID: id, body: nil, replacing: rev)], concurrency: concurrency)[0]
    }

    /// Applies `writes` in order in one transaction: all of them or none. Returns the new revision
    /// ids in the same order. Input is checked before anything is written.
    public func putBatch(_ writes: [LocalWrite], concurrency: WriteConcurrency = .failOnConflict) throws(StoreError) -> [RevisionID] {
        guard writes.count <= StoreLimits.foreignBatchCountMax else {
            throw .invalidInput(.batchTooLarge(count: writes.count, limit: StoreLimits.foreignBatchCountMax))
        }
        let prepared: [PreparedWrite]
        do {
            try AttachmentCheck.check(writes, against: attachments)
            prepared = try Self.prepare(writes)
        } catch { throw .invalidInput(error) }
        return try write { context in
            try Self.applyLocalEdits(context, writes, prepared, concurrency: concurrency, conflictsPerDocument: false).map {
                try $0.get()
            }
        }
    }

    /// CouchDB's `_bulk_docs` (with `new_edits` true): applies `writes` in order in one
    /// transaction, each on its own — a stale `replacing` (one of a document that does not
    /// exist included, or a creation of a document that exists) is reported for that document as
    /// `.conflict` (`current` nil when the document does not exist) and the rest are written. Invalid
    /// input (an id, a body) fails the whole call before anything is written, naming the document.
    /// Creations of new documents take the batched path, so a bulk load runs at the store's
    /// batched-write rate.
    public func putBulk(_ writes: [LocalWrite]) throws(StoreError) -> [BulkWriteResult] {
        guard writes.count <= StoreLimits.foreignBatchCountMax else {
            throw .invalidInput(.batchTooLarge(count: writes.count, limit: StoreLimits.foreignBatchCountMax))
        }
        let prepared: [PreparedWrite]
        do {
            try AttachmentCheck.check(writes, against: attachments)
            prepared = try Self.prepare(writes)
        } catch { throw .invalidInput(error) }
        return try write { context in
            try Self.applyLocalEdits(context, writes, prepared, concurrency: .failOnConflict, conflictsPerDocument: true).map { result in
                switch result {
                case .success(let revision): return .written(revision)
                case .failure(.conflict(_, _, let current)): return .conflict(current: current)
                case .failure(let error): throw error
                }
            }
        }
    }

    /// A local write's canonical body and, for a creation (no revision replaced, not a
    /// deletion), the one-revision path of the new document.
    private struct PreparedWrite: Sendable {
        let body: [UInt8]
        let creation: RevisionPath?
    }

    /// Checks and encodes writes before the transaction. Canonical encoding and a creation's hash
    /// are pure and most of a put's CPU time outside SQLite: done in parallel.
    private static func prepare(_ writes: [LocalWrite]) throws(StoreInputError) -> [PreparedWrite] {
        try ParallelMap.map(writes) { write throws(StoreInputError) in
            try InputValidation.checkDocumentID(write.documentID)
            guard let value = write.body else { return PreparedWrite(body: CanonicalJSON.encode(.emptyObject), creation: nil) }
            let body = try InputValidation.canonicalBody(value, documentID: write.documentID)
            guard write.replacing == nil else { return PreparedWrite(body: body, creation: nil) }
            let id = RevisionHasher.revisionID(parent: nil, kind: .live, canonicalBody: body)
            return PreparedWrite(body: body, creation: try? RevisionPath(leaf: id, kind: .live))
        }
    }

    /// Applies a batch of local edits in order. Creations are queued for `NewChainBatch`
    /// (multi-row statements); any other write first flushes the queue, so writes apply, and get
    /// their sequences, in order.
    /// With `conflictsPerDocument`, a write that is stale is reported as a failure in its slot
    /// (nothing of it was written) and the others go on — a write naming a revision of a
    /// document that does not exist too, as the conflict it is in CouchDB's `_bulk_docs`;
    /// otherwise the first conflict throws.
    private static func applyLocalEdits(
        _ context: WriteContext, _ writes: [LocalWrite], _ prepared: [PreparedWrite], concurrency: WriteConcurrency,
        conflictsPerDocument: Bool
    ) throws -> [Result<RevisionID, StoreError>] {
        var results = [Result<RevisionID, StoreError>?](repeating: nil, count: writes.count)
        func apply(_ slot: Int, _ body: [UInt8]) throws {
            do {
                results[slot] = .success(try applyLocalEdit(context, writes[slot], canonicalBody: body, concurrency: concurrency))
            } catch let error as StoreError {
                guard conflictsPerDocument else { throw error }
                switch error {
                case .conflict: results[slot] = .failure(error)
                case .notFound(let id, _) where writes[slot].replacing != nil:
                    results[slot] = .failure(.conflict(documentID: id, replacing: writes[slot].replacing, current: nil))
                default: throw error
                }
            }
        }
        var batch = NewChainBatch()
        let flush = { (batch: inout NewChainBatch) throws in
            try batch.flush(
                context, written: { item in results[item.slot] = .success(item.path.leaf) },
                oneByOne: { item, _ in try apply(item.slot, item.body) })
        }
        for (slot, write) in writes.enumerated() {
            if let creation = prepared[slot].creation {
                batch.append(.init(slot: slot, documentID: write.documentID, path: creation, body: prepared[slot].body))
                continue
            }
            try flush(&batch)
            try apply(slot, prepared[slot].body)
        }
        try flush(&batch)
        return results.map { $0! }
    }

    /// Adds one local edit to its document's tree and writes it.
    private static func applyLocalEdit(
        _ context: WriteContext, _ write: LocalWrite, canonicalBody: [UInt8], concurrency: WriteConcurrency
    ) throws -> RevisionID {
        if write.replacing == nil, write.body != nil {
            // Creating a document that does not exist (the common case): one INSERT, no lookup.
            let id = RevisionHasher.revisionID(parent: nil, kind: .live, canonicalBody: canonicalBody)
            let path = try RevisionPath(leaf: id, kind: .live)
            if try RevisionRows.insertNewChain(context, documentID: write.documentID, path: path, body: canonicalBody) != nil {
                return id
            }
        }
        var document = try RevisionRows.loadForWrite(context.db, documentID: write.documentID)
        var body = canonicalBody
        var kind: RevisionKind = write.body == nil ? .deleted : .live
        let parent: RevisionID?
        switch try editParent(of: document, write: write) {
        case .some(let accepted):
            parent = accepted
        case .none:
            let current = try currentDocument(context.db, document)
            switch concurrency {
            case .failOnConflict:
                throw StoreError.conflict(documentID: write.documentID, replacing: write.replacing, current: current.revision)
            case .lastWriteWins:
                // Deleting what is already deleted changes nothing.
                if kind.isDeleted, current.isDeleted { return current.revision }
            case .handler(let handler):
                let conflicting = ConflictingWrite(
                    documentID: write.documentID, replacing: write.replacing, proposed: write.body, current: current)
                let resolved: JSONValue?
                do { resolved = try handler(conflicting) } catch {
                    throw StoreError.handlerFailed(documentID: write.documentID, underlying: error)
                }
                guard let resolved else {
                    throw StoreError.conflict(documentID: write.documentID, replacing: write.replacing, current: current.revision)
                }
                body = try InputValidation.canonicalBody(resolved, documentID: write.documentID)
                kind = .live
            }
            parent = current.revision
        }
        let id = RevisionHasher.revisionID(parent: parent, kind: kind, canonicalBody: body)
        do {
            try document.tree.insertEdit(id: id, parent: parent, kind: kind)
        } catch {
            throw StoreError.conflict(documentID: write.documentID, replacing: write.replacing, current: document.tree.current?.id)
        }
        document.noteAdded(id, body: body)
        RevisionRows.stem(&document, context)
        try RevisionRows.persist(context, &document)
        return id
    }

    /// The parent a local edit may be written under, `.some(nil)` for a new document, or nil
    /// when the edit is stale (optimistic concurrency failed).
    private static func editParent(of document: StoredDocument, write: LocalWrite) throws -> RevisionID?? {
        let tree = document.tree
        guard let current = tree.current else {
            // A new document: it must not claim to replace anything, and cannot be deleted.
            if write.body == nil { throw StoreError.notFound(documentID: write.documentID, revision: write.replacing) }
            return write.replacing == nil ? .some(nil) : nil
        }
        guard let replacing = write.replacing else {
            // Re-creating a deleted document continues its tombstone's branch.
            return current.kind.isDeleted && write.body != nil ? .some(current.id) : nil
        }
        guard let node = tree.node(replacing), tree.isLeaf(replacing), !node.kind.isClosed else { return nil }
        // A deleted leaf may only be replaced when it is the current revision (re-creation), and
        // a deletion cannot be deleted again.
        if node.kind.isDeleted && (node.id != current.id || write.body == nil) { return nil }
        return .some(replacing)
    }

    /// The current revision of a loaded document, with its body.
    static func currentDocument(_ db: Database, _ document: StoredDocument) throws -> Document {
        guard let current = document.tree.current else {
            throw StoreError.notFound(documentID: document.id, revision: nil)
        }
        return try makeDocument(db, document, revision: current.id, options: [])
    }

    /// Builds the API value for `revision` of a loaded document.
    static func makeDocument(_ db: Database, _ document: StoredDocument, revision: RevisionID, options: GetOptions) throws -> Document {
        guard let node = document.tree.node(revision) else {
            throw StoreError.notFound(documentID: document.id, revision: revision)
        }
        guard let bytes = try RevisionRows.verifiedBody(db, of: document, node: node) else {
            throw StoreError.bodyUnavailable(documentID: document.id, revision: revision)
        }
        let body: JSONValue
        do { body = try InputValidation.storedBody(bytes, documentID: document.id) } catch {
            throw StoreError.damaged(StoredDamage(documentID: document.id, revision: revision, reason: "its stored body does not parse: \(error)"))
        }
        var result = Document(id: document.id, revision: revision, kind: node.kind, body: body)
        if options.contains(.revisions) { result.history = document.tree.ancestry(of: revision) }
        if options.contains(.conflicts) {
            let others = document.tree.openLeaves.filter { $0.id != revision }
            result.conflicts = others.filter { !$0.kind.isDeleted }.map(\.id)
            result.deletedConflicts = others.filter { $0.kind.isDeleted }.map(\.id)
        }
        return result
    }
}
