#if canImport(Glibc)
import Glibc
#endif
import CanopyCore

extension RevisionRows {
    /// Stems `document` to the transaction's revsLimit per leaf, keeping the common ancestor of an
    /// open conflict (and the path from it to each leaf) so a three-way merge can still use its
    /// body, and keeping what peers may still hold (the lowest peer horizon; see
    /// `recordPeerHorizon`): the previous state's leaves when every peer has that state, and
    /// everything when some peer has not. Removed revisions are marked touched; `persist` deletes
    /// their rows.
    static func stem(_ document: inout StoredDocument, _ context: WriteContext) {
        guard document.tree.count > context.revsLimit else { return }
        var keeping = Set<RevisionID>()
        if let horizon = context.stemHorizon, let previous = document.sequence {
            guard previous <= horizon else { return }
            for leaf in document.storedTree.leaves { keeping.insert(leaf.id) }
        }
        if let ancestor = conflictAncestor(document.tree) { keeping.insert(ancestor) }
        let removed = document.tree.stem(limit: context.revsLimit, keeping: keeping)
        document.touched.append(contentsOf: removed)
    }

    /// The common ancestor of a conflicted tree's conflicting leaves, if the tree holds one.
    static func conflictAncestor(_ tree: RevTree) -> RevisionID? {
        let conflicting = tree.conflictingLeaves.map(\.id)
        return conflicting.count > 1 ? tree.commonAncestor(of: conflicting) : nil
    }
}

/// Compaction: dropping bodies nobody needs.
extension DocumentStore {
    /// Drops the bodies of non-leaf revisions, except the common ancestor of each open conflict
    /// (three-way merge needs it), then rebuilds the file to return the space (pouchdb#4372: history
    /// that is only hidden keeps growing the file), and empties the write-ahead log: in WAL mode
    /// `VACUUM` writes the whole rebuilt file through the log, which then stayed at about 1.8
    /// times the database until the next restart (passive checkpoints copy frames out but never
    /// shrink the file). Returns how many bodies were dropped.
    @discardableResult
    public func compact() throws(StoreError) -> Int {
        let dropped = try write { context in
            let db = context.db
            try db.run(
                """
                UPDATE revisions SET body = NULL WHERE leaf = 0 AND body IS NOT NULL
                AND doc_key IN (SELECT doc_key FROM documents WHERE conflicted = 0)
                """)
            var dropped = db.changes
            let conflicted = try db.query("SELECT doc_key, doc_id FROM documents WHERE conflicted = 1 ORDER BY doc_key") {
                ($0.int64(0), $0.text(1))
            }
            for (key, id) in conflicted {
                let tree = try RevisionRows.loadTree(db, key: key, documentID: id)
                let keep = RevisionRows.conflictAncestor(tree)
                try db.run(
                    """
                    UPDATE revisions SET body = NULL WHERE doc_key = ? AND leaf = 0 AND body IS NOT NULL
                    AND NOT (generation = ? AND digest = ?)
                    """,
                    .integer(key), .integer(Int64(keep?.generation ?? 0)), .blob(keep?.digest ?? []))
                dropped += db.changes
            }
            return dropped
        }
        try read { db in try db.execute("VACUUM") }
        // A reader holding the log for longer than the retries leaves it as it is: the background
        // checkpoints still copy it out, and the next compaction or clean stop truncates it.
        try checkpointAndTruncateLog()
        return dropped
    }
}

/// Leaving the database file whole.
extension DocumentStore {
    /// Copies every committed transaction from the write-ahead log into the database file and
    /// empties the log (`PRAGMA wal_checkpoint(TRUNCATE)`), so the file alone holds everything:
    /// a copy of `canopy.sqlite` made after a clean stop is complete. Waits for a checkpoint
    /// another connection is running, at most `attempts` × 20 ms. Returns false when the log could
    /// not be emptied (a reader still holds it).
    @discardableResult
    public func checkpointAndTruncateLog(attempts: Int = 50) throws(StoreError) -> Bool {
        for attempt in 0..<max(1, attempts) {
            let busy = try read { db in try db.queryFirst("PRAGMA wal_checkpoint(TRUNCATE)") { $0.int(0) } ?? 0 }
            if busy == 0 { return true }
            if attempt + 1 < attempts { usleep(20_000) }
        }
        return false
    }
}

/// Backups.
extension DocumentStore {
    /// What `backup(to:attachmentsTo:)` wrote.
    public struct BackupResult: Sendable, Equatable {
        /// Documents the snapshot holds that are not deleted.
        public var documents: Int
        /// Attachment content files copied (content already in the target is not counted).
        public var attachmentFiles = 0
        /// Their bytes.
        public var attachmentBytes: Int64 = 0
        /// Content the snapshot's revisions name that could not be copied, one line each (the
        /// digest and why: not on this node, or damaged here). Empty for a complete backup.
        public var attachmentProblems: [String] = []
    }

    /// Writes a consistent snapshot of the store to a new file at `path` (`VACUUM INTO`, compact:
    /// free pages left out), from a connection of its own: a snapshot of the last committed
    /// transaction, taken while the store keeps writing (WAL readers do not block the writer).
    /// The file is a complete store (no log beside it). Fails if `path` exists. Returns how many
    /// documents the snapshot holds that are not deleted (as `documentCount - deletedCount`),
    /// read from the written file.
    @discardableResult
    public func backup(to path: String) throws(StoreError) -> Int {
        try backup(to: path, attachmentsTo: nil).documents
    }

    /// `backup(to:)`, and the attachment content the snapshot's revisions name copied into
    /// `target` (a backup's own attachment directory), each file read part by part and checked
    /// against its digest as it is copied, so damaged content is reported rather than copied.
    /// The content this store's revisions name is pinned from before the snapshot until it is
    /// copied, so a compaction meanwhile cannot remove what the snapshot names.
    public func backup(to path: String, attachmentsTo target: AttachmentStore?) throws(StoreError) -> BackupResult {
        var pins: [AttachmentPin] = []
        defer { for pin in pins { pin.release() } }
        do {
            let reader = try Database(path: db.path)
            if target != nil {
                pins = try reader.query("SELECT digest FROM attachment_names") { row in
                    row.blob(0).flatMap { $0.count == AttachmentDigest.byteCount ? attachments.pin(AttachmentDigest(bytes: $0)) : nil }
                }.compactMap { $0 }
            }
            try reader.run("VACUUM INTO ?", .text(path))
            try reader.run("ATTACH DATABASE ? AS snapshot", .text(path))
            let documents = try reader.scalarInt("SELECT count(*) FROM snapshot.documents WHERE deleted = 0") ?? 0
            // What the snapshot's revisions name must be copied; what its revisions set aside for
            // their content name is copied when it is here (the rest is fetched after a restore).
            let needed = target == nil ? [] : try RevisionRows.digestsNamedByStoredBodies(reader, schema: "snapshot")
            var setAside = Set<AttachmentDigest>()
            if target != nil { try Self.digestsNamedBySetAside(reader, schema: "snapshot", into: &setAside) }
            try reader.execute("DETACH DATABASE snapshot")
            var result = BackupResult(documents: Int(documents))
            guard let target else { return result }
            for digest in needed.union(setAside).sorted(by: { $0.hex < $1.hex }) where !target.contains(digest) {
                guard attachments.contains(digest) else {
                    if needed.contains(digest) { result.attachmentProblems.append("\(digest): not on this node") }
                    continue
                }
                do {
                    result.attachmentBytes += try target.copy(digest, from: attachments)
                    result.attachmentFiles += 1
                } catch {
                    result.attachmentProblems.append("\(digest): \(error.detail)")
                }
            }
            return result
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError.wrap(error)
        }
    }
}

/// Integrity checks.
extension DocumentStore {
    /// SQLite's `PRAGMA quick_check` (or, `full`, `integrity_check`, which also checks that every
    /// index matches its table), on a connection of its own so the store keeps writing meanwhile.
    /// Returns the problems found, at most `problemsMax`; empty when the file is sound. A file so
    /// damaged that SQLite stops the check is one problem, SQLite's error.
    public func checkIntegrity(full: Bool, problemsMax: Int = 100) throws(StoreError) -> [String] {
        do {
            let reader = try Database(path: db.path)
            let pragma = full ? "integrity_check" : "quick_check"
            let lines = try reader.query("PRAGMA \(pragma)(\(max(1, problemsMax)))") { $0.text(0) }
            return lines == ["ok"] ? [] : lines
        } catch {
            let wrapped = StoreError.wrap(error)
            guard wrapped.isCorruption else { throw wrapped }
            return [wrapped.description]
        }
    }
}
