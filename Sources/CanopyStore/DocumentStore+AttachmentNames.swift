import CanopyCore

/// Which attachment content belongs to this database, for its peers.
///
/// An agent's databases keep their content in one directory, so content is stored once however
/// many databases name it. A peer replicating one database must not read content only another
/// names: `attachment_names` lists every content a revision stored in this database has named,
/// written in the transaction that stores the revision, and a peer's `attachmentGet` is answered
/// only for content listed there (`Protocol/replication-v1.md` §6.12).
///
/// Nor may a peer get content into that list by naming it: a peer's revision naming content the
/// directory holds but this database does not list is set aside and the content fetched from the
/// peer like content that is not here (it must hold the bytes, which hash to the digest), so a
/// peer that only knows a digest cannot make another database's content this one's. Content a
/// fetch of this database verified is listed when the revisions waiting for it are merged (even
/// if none of them is stored: one the tree already held as an ancestor, say). Content an
/// application or an administrator names (a local write, an import) is taken as it is.
///
/// The list only grows: content a revision named once stays fetchable through the database
/// after compaction drops that revision's body, as it was while the body was kept.
extension DocumentStore {
    /// Whether a revision stored in this database has named `digest`. Reads the last committed
    /// snapshot (it never waits for a write in progress).
    public func namesAttachment(_ digest: AttachmentDigest) throws(StoreError) -> Bool {
        try readSnapshot { db in try Self.namesAttachment(db, digest) }
    }

    /// Whether a stored revision of a document that `admits` names `digest`: what a peer
    /// allowed some documents of this database only may be sent of its content. `idPrefix` and
    /// `documentIDs` narrow the search before `admits` (the document id, the revision's body)
    /// decides; without either, every document that names the content is read. A revision whose
    /// body compaction dropped names nothing here. Reads the last committed snapshot.
    public func namesAttachment(
        _ digest: AttachmentDigest, idPrefix: String? = nil, documentIDs: [String]? = nil,
        admits: (String, [UInt8]) -> Bool
    ) throws(StoreError) -> Bool {
        try readSnapshot { db in
            guard try Self.namesAttachment(db, digest) else { return false }
            var sql = """
                SELECT d.doc_id, r.body FROM documents d JOIN revisions r ON r.doc_key = d.doc_key
                WHERE r.body IS NOT NULL AND instr(r.body, CAST(? AS BLOB)) > 0
                """
            var values: [SQLiteValue] = [.text(digest.description)]
            if let idPrefix {
                sql += " AND d.doc_id >= ? AND substr(d.doc_id, 1, length(?)) = ?"
                values += [.text(idPrefix), .text(idPrefix), .text(idPrefix)]
            }
            if let documentIDs {
                guard !documentIDs.isEmpty else { return false }
                sql += " AND d.doc_id IN (\(documentIDs.map { _ in "?" }.joined(separator: ",")))"
                values += documentIDs.map { .text($0) }
            }
            var found = false
            _ = try db.query(sql, values) { row in
                if !found, admits(row.text(0), row.blob(1) ?? []) { found = true }
            }
            return found
        }
    }

    /// `namesAttachment(_:)` on `db`, in the caller's transaction.
    static func namesAttachment(_ db: Database, _ digest: AttachmentDigest) throws -> Bool {
        try db.queryFirst("SELECT 1 FROM attachment_names WHERE digest = ?", [.blob(digest.bytes)]) { _ in true } ?? false
    }
}

extension RevisionRows {
    /// Lists the content a revision body about to be stored names (nothing when it names none:
    /// `attachmentDigests(namedIn:into:)` first scans for its `_attachments` key, at the C
    /// library's `memchr` speed).
    static func nameAttachments(_ db: Database, body: [UInt8]?) throws {
        guard let body else { return }
        var named = Set<AttachmentDigest>()
        DocumentStore.attachmentDigests(namedIn: body, into: &named)
        try insertAttachmentNames(db, named)
    }

    /// Fills `attachment_names` from every body the file stores (the schema step that adds it).
    static func nameAllStoredAttachments(_ db: Database) throws {
        try insertAttachmentNames(db, try digestsNamedByStoredBodies(db))
    }

    /// The digest of every content some stored revision body names, in one scan of the
    /// revisions: SQLite passes on only the bodies holding the bytes `"_attachments":`, and those
    /// are read as far as their top-level `_attachments` member. `schema` names the database of
    /// the connection to read (an attached backup's, for example).
    static func digestsNamedByStoredBodies(_ db: Database, schema: String = "main") throws -> Set<AttachmentDigest> {
        var named = Set<AttachmentDigest>()
        _ = try db.query(
            """
            SELECT body FROM \(schema).revisions
            WHERE body IS NOT NULL AND instr(body, CAST('"_attachments":' AS BLOB)) > 0
            """
        ) { row in
            if let body = row.blob(0) { DocumentStore.attachmentDigests(namedIn: body, into: &named) }
        }
        return named
    }

    /// Lists `digests` as content of this database.
    static func insertAttachmentNames(_ db: Database, _ digests: Set<AttachmentDigest>) throws {
        guard !digests.isEmpty else { return }
        let statement = try db.statement("INSERT OR IGNORE INTO attachment_names(digest) VALUES (?)")
        for digest in digests {
            try statement.bind(digest.bytes, at: 1)
            try statement.run()
        }
    }
}
