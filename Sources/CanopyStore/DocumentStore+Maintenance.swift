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
    /// that is only hidden keeps growing the file). Returns how many bodies were dropped.
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
    /// Writes a consistent snapshot of the store to a new file at `path` (`VACUUM INTO`, compact:
    /// free pages left out), from a connection of its own: a snapshot of the last committed
    /// transaction, taken while the store keeps writing (WAL readers do not block the writer).
    /// The file is a complete store (no log beside it). Fails if `path` exists. Returns how many
    /// documents the snapshot holds that are not deleted (as `documentCount - deletedCount`),
    /// read from the written file.
    @discardableResult
    public func backup(to path: String) throws(StoreError) -> Int {
        do {
            let reader = try Database(path: db.path)
            try reader.run("VACUUM INTO ?", .text(path))
            try reader.run("ATTACH DATABASE ? AS snapshot", .text(path))
            let documents = try reader.scalarInt("SELECT count(*) FROM snapshot.documents WHERE deleted = 0") ?? 0
            try reader.execute("DETACH DATABASE snapshot")
            return Int(documents)
        } catch {
            throw StoreError.wrap(error)
        }
    }
}

/// Integrity checks.
extension DocumentStore {
    /// SQLite's `PRAGMA quick_check` (or, `full`, `integrity_check`, which also checks that every
    /// index matches its table), on a connection of its own so the store keeps writing meanwhile.
    /// Returns the problems found, at most `problemsMax`; empty when the file is sound.
    public func checkIntegrity(full: Bool, problemsMax: Int = 100) throws(StoreError) -> [String] {
        do {
            let reader = try Database(path: db.path)
            let pragma = full ? "integrity_check" : "quick_check"
            let lines = try reader.query("PRAGMA \(pragma)(\(max(1, problemsMax)))") { $0.text(0) }
            return lines == ["ok"] ? [] : lines
        } catch {
            throw StoreError.wrap(error)
        }
    }
}
