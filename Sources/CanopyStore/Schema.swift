/// The store's schema and its forward migrations. The version lives in `PRAGMA user_version`:
/// 0 is an empty file, and step `n` (1-based) of `migrations` moves a file from version `n - 1`
/// to `n`, inside the same transaction as the version bump, so a crash leaves either version.
///
/// Data model (one row per thing, every query served by an index):
///
///     metadata(key, value)                       database id, revs limit, sequence counter
///     documents(sequence PRIMARY KEY, doc_key, doc_id UNIQUE, current_generation,
///               current_digest, deleted, conflicted, leaves, row_check)
///                                                the changes index: each document once, at the
///                                                sequence of its latest change; row_check: the
///                                                row's `RowCheck` (version 8 on)
///     revisions(doc_key, generation, digest, parent, kind, leaf, body, closed_child)
///               PRIMARY KEY (doc_key, generation, digest)
///                                                kind: the RevisionKind, plus 8 when the id is
///                                                imported (not a content hash; version 3 on);
///                                                closed_child: the digest of the revision's
///                                                closing tombstone when the row holds it
///                                                (version 6 on)
///     local_documents(local_id, body)            never replicated (checkpoints, settings)
///     awaiting_revisions(doc_id, rev, ancestors, root_parent, kind, imported, body)
///     awaiting_digests(digest, length, doc_id, rev)
///                                                peers' revisions waiting for attachment
///                                                content, and the content each waits for
///                                                (version 4 on)
///     attachment_names(digest)                   every attachment content a revision stored
///                                                here has named, never removed: what a peer
///                                                may fetch through this database (version 5 on)
///     kept_imported_conflicts(doc_id)            documents whose conflict an import kept as it
///                                                came, which the retry pass leaves alone
///                                                (`KeptImportedConflicts`; version 7 on)
///     digest_buckets(bucket, documents, deleted, digest)
///                                                the digest tree's lowest level, kept in every
///                                                write transaction (`DigestBuckets`; version 9 on)
///
/// `documents.sequence` is the rowid, so the changes feed is a rowid range scan and a document
/// write maintains one index (doc_id) besides the table, not two. A document's row moves to a new
/// rowid on every change; `doc_key`, the sequence of its first write, is the stable key its
/// revisions refer to (never reused: sequences only grow).
///
/// `revisions.parent` is the parent's digest (its generation is always one less), NULL for a root
/// (a first revision or the oldest revision kept after stemming). A document's whole tree is read
/// with one range scan of the primary key (`doc_key = ?`), and leaves are computed in memory from
/// that tree, so no query ever looks for "revisions that are nobody's parent" (the
/// `NOT IN (SELECT DISTINCT parent …)` scan that made Cloudant Sync's pulls slow); for the same
/// reason no `(doc_key, parent)` index is needed. `documents.leaves` repeats the leaf set
/// (generation, digest, kind per leaf, current first; see `LeafList`) so the changes feed is one
/// indexed scan of `documents` with no join. Bodies are canonical JSON bytes; NULL once dropped.
enum Schema {
    /// The version this build writes; files with a higher version are refused.
    static let currentVersion = migrations.count

    /// The migration steps, oldest first. Never edit a released step; append a new one.
    static let migrations: [String] = [
        // 1: documents, revisions, metadata.
        """
        CREATE TABLE metadata (
            key TEXT PRIMARY KEY NOT NULL,
            value ANY
        ) WITHOUT ROWID, STRICT;
        CREATE TABLE documents (
            sequence INTEGER PRIMARY KEY,
            doc_key INTEGER NOT NULL,
            doc_id TEXT NOT NULL UNIQUE,
            current_generation INTEGER NOT NULL,
            current_digest BLOB NOT NULL,
            deleted INTEGER NOT NULL,
            conflicted INTEGER NOT NULL,
            leaves BLOB NOT NULL
        ) STRICT;
        CREATE TABLE revisions (
            doc_key INTEGER NOT NULL,
            generation INTEGER NOT NULL,
            digest BLOB NOT NULL,
            parent BLOB,
            kind INTEGER NOT NULL,
            leaf INTEGER NOT NULL,
            body BLOB,
            PRIMARY KEY (doc_key, generation, digest)
        ) STRICT;
        """,
        // 2: local documents, and a partial index so the retry pass finds conflicted documents
        // without scanning every document.
        """
        CREATE TABLE local_documents (
            local_id TEXT PRIMARY KEY NOT NULL,
            body BLOB NOT NULL
        ) STRICT;
        CREATE INDEX documents_conflicted ON documents(doc_id) WHERE conflicted = 1;
        """,
        // 3: `revisions.kind` may carry `RevisionRows.importedKindFlag` (an imported revision id).
        // No row changes; the version keeps builds that do not know the flag from reading it as
        // damage.
        "SELECT 1;",
        // 4: peers' revisions set aside until the attachment content they name is here
        // (`DocumentStore+AwaitingContent`), with one row per content each one waits for.
        // `awaiting_digests` keeps its rowid: SQLite 3.40's integrity_check reports a NOT NULL
        // column of a WITHOUT ROWID table that has a second index as NULL when it is not.
        """
        CREATE TABLE awaiting_revisions (
            doc_id TEXT NOT NULL,
            rev TEXT NOT NULL,
            ancestors TEXT NOT NULL,
            root_parent TEXT,
            kind INTEGER NOT NULL,
            imported INTEGER NOT NULL,
            body BLOB NOT NULL,
            PRIMARY KEY (doc_id, rev)
        ) WITHOUT ROWID, STRICT;
        CREATE TABLE awaiting_digests (
            digest BLOB NOT NULL,
            length INTEGER NOT NULL,
            doc_id TEXT NOT NULL,
            rev TEXT NOT NULL,
            UNIQUE (digest, doc_id, rev)
        ) STRICT;
        CREATE INDEX awaiting_digests_revision ON awaiting_digests(doc_id, rev);
        """,
        // 5: the attachment content this database's revisions have named
        // (`DocumentStore+AttachmentNames`): a peer is sent content only on the channel of a
        // database that names it. The step fills it from the stored bodies (`fill`).
        """
        CREATE TABLE attachment_names (
            digest BLOB PRIMARY KEY NOT NULL
        ) WITHOUT ROWID, STRICT;
        """,
        // 6: a revision's closing tombstone kept in the revision's own row (see `RevisionRows`,
        // "Closing tombstones"): `closed_child` holds its digest. Closing tombstones written
        // before keep rows of their own; both forms are read.
        "ALTER TABLE revisions ADD COLUMN closed_child BLOB;",
        // 7: the documents whose conflict an import kept as it came (`ImportConflicts.keep`),
        // which the retry pass leaves to whoever resolves them (`KeptImportedConflicts`).
        """
        CREATE TABLE kept_imported_conflicts (
            doc_id TEXT PRIMARY KEY NOT NULL
        ) WITHOUT ROWID, STRICT;
        """,
        // 8: each document row's check value (`RowCheck`), so damage that leaves a row well
        // formed is found. The step computes it for the rows already in the file (`fill`).
        "ALTER TABLE documents ADD COLUMN row_check INTEGER;",
        // 9: the digest tree's buckets (`DigestBuckets`): per bucket of document ids, the
        // documents, the deleted ones and the exclusive-or of their digests. The step computes
        // them from the rows already in the file (`fill`).
        """
        CREATE TABLE digest_buckets (
            bucket INTEGER PRIMARY KEY,
            documents INTEGER NOT NULL,
            deleted INTEGER NOT NULL,
            digest BLOB NOT NULL
        ) STRICT;
        """,
        // 10: every document id under its 32-bit id hash (`DigestIndex`), so the documents under
        // a node of the digest tree are read by a range, not a scan. A row is written when its
        // document is first written and never changes. The step fills it from the rows already
        // in the file (`fill`).
        """
        CREATE TABLE digest_index (
            id_hash INTEGER NOT NULL,
            doc_id TEXT NOT NULL,
            PRIMARY KEY (id_hash, doc_id)
        ) WITHOUT ROWID, STRICT;
        """,
    ]

    /// What a step writes beyond its SQL, in the same transaction: rows computed from the rows
    /// already in the file.
    private static func fill(_ db: Database, version: Int) throws {
        switch version {
        case 5: try RevisionRows.nameAllStoredAttachments(db)
        case 8: try fillRowChecks(db)
        case 9: try DigestBuckets.compute(db).writeAll(db)
        case 10: try DigestIndex.fill(db)
        default: break
        }
    }

    /// Computes `row_check` for every document row, a page of rows at a time, from the row as it
    /// is: damage already in a row before this version is found by the checks that compare a row
    /// with its revisions (`DocumentStore.checkRows`), not by this value.
    private static func fillRowChecks(_ db: Database) throws {
        var after: Int64 = 0
        while true {
            let page = try db.query(
                "SELECT sequence, doc_key, leaves, doc_id FROM documents WHERE sequence > ? ORDER BY sequence LIMIT 4096",
                [.integer(after)]
            ) { row in
                (row.int64(0), RowCheck.value(documentKey: row.int64(1), leaves: row.borrowedBlob(2), idBytes: row.borrowedText(3)))
            }
            guard let last = page.last else { return }
            for (sequence, check) in page {
                try db.run("UPDATE documents SET row_check = ? WHERE sequence = ?", .integer(check), .integer(sequence))
            }
            after = last.0
        }
    }

    /// Brings `db` to `target` (default: the current version), one step per transaction.
    /// Throws `StoreError.schemaTooNew` for a file written by a newer build, touching nothing.
    static func migrate(_ db: Database, to target: Int = currentVersion) throws {
        let found = Int(try db.pragmaInt("user_version"))
        guard found <= currentVersion else {
            throw StoreError.schemaTooNew(path: db.path, found: found, supported: currentVersion)
        }
        guard found < target else { return }
        for version in (found + 1)...target {
            try db.transaction { db in
                try db.execute(migrations[version - 1])
                try fill(db, version: version)
                try db.execute("PRAGMA user_version = \(version)")
            }
        }
    }
}
