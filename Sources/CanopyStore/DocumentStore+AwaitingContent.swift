import CanopyCore
import Synchronization

/// A peer's revision whose attachment content is not all on this node yet, set aside until it
/// is (`DocumentStore+AwaitingContent`).
struct AwaitingRevision: Sendable {
    let revision: DocumentStore.CheckedRevision
    /// The content it names that is not here, by digest.
    let missing: [AttachmentMetadata]
}

/// Content some set-aside revision waits for: what a replicator fetches from its peer.
public struct AwaitedAttachment: Sendable, Hashable {
    public let digest: AttachmentDigest
    public let length: Int64

    public init(digest: AttachmentDigest, length: Int64) {
        self.digest = digest
        self.length = length
    }
}

/// Revisions received from peers that name attachment content this node does not hold.
///
/// A revision becomes visible only with all of its content, verified. Such a revision is not
/// merged into its document when its batch is written: it is set aside in `awaiting_revisions`,
/// in the same transaction as the rest of the batch and the replication checkpoint, with one
/// row in `awaiting_digests` per content it lacks. So the pull moves past it (small documents
/// behind a large attachment are not held up), and a restart loses nothing: the rows, and the
/// `partial-` files of content being fetched (`AttachmentDownload`), are on disk. When content
/// arrives, `settleAwaitingContent(digests:policy:)` merges every set-aside revision that now
/// has all of its content, exactly as its batch would have, and removes its rows, in one
/// transaction.
extension DocumentStore {
    /// Splits a checked batch into the revisions to merge now and those whose attachment content
    /// is not all here (a `stat` per content named; bodies without `_attachments` cost nothing).
    ///
    /// `fromPeer`: the revisions came from a peer, whose content must be this database's
    /// (`holdsAttachment(_:length:)`), not merely in the directory.
    func partitionAwaitingContent(
        _ checked: [CheckedRevision], fromPeer: Bool
    ) throws(StoreError) -> (ready: [CheckedRevision], awaiting: [AwaitingRevision]) {
        guard checked.contains(where: \.namesAttachments) else { return (checked, []) }
        var ready: [CheckedRevision] = []
        var awaiting: [AwaitingRevision] = []
        ready.reserveCapacity(checked.count)
        for revision in checked {
            guard revision.namesAttachments else {
                ready.append(revision)
                continue
            }
            let named: [String: AttachmentMetadata]
            do {
                named = try AttachmentCheck.metadata(of: revision.body)
            } catch {
                throw .invalidInput(.invalidAttachments(documentID: revision.documentID, detail: error.description))
            }
            var missing: [AttachmentMetadata] = []
            var seen = Set<AttachmentDigest>()
            for metadata in named.values.sorted(by: { $0.digest.hex < $1.digest.hex })
            where seen.insert(metadata.digest).inserted
                && !(fromPeer ? holdsAttachment(metadata.digest, length: metadata.length) : attachments.contains(metadata.digest, length: metadata.length)) {
                guard metadata.length <= attachments.sizeLimit else {
                    throw .invalidInput(.invalidAttachments(
                        documentID: revision.documentID,
                        detail: "attachment content \(metadata.digest) has \(metadata.length) bytes; this node takes at most \(attachments.sizeLimit) (attachment-size-limit)"))
                }
                missing.append(metadata)
            }
            if missing.isEmpty { ready.append(revision) } else { awaiting.append(.init(revision: revision, missing: missing)) }
        }
        return (ready, awaiting)
    }

    /// Writes `awaiting` into the set-aside tables, in the caller's transaction. A revision set
    /// aside again (sent twice) replaces its rows.
    static func setAside(_ awaiting: [AwaitingRevision], _ db: Database) throws {
        for item in awaiting {
            let revision = item.revision
            let rev = revision.path.leaf.description
            try db.run(
                """
                INSERT OR REPLACE INTO awaiting_revisions(doc_id, rev, ancestors, root_parent, kind, imported, body)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                """,
                .text(revision.documentID), .text(rev),
                .text(revision.path.ancestors.map(\.description).joined(separator: " ")),
                revision.path.rootParent.map { .text($0.description) } ?? .null,
                .integer(Int64(revision.path.kind.rawValue)), .integer(revision.importedID ? 1 : 0), .blob(revision.body))
            try db.run("DELETE FROM awaiting_digests WHERE doc_id = ? AND rev = ?", .text(revision.documentID), .text(rev))
            for metadata in item.missing {
                try db.run(
                    "INSERT INTO awaiting_digests(digest, length, doc_id, rev) VALUES (?, ?, ?, ?)",
                    .blob(metadata.digest.bytes), .integer(metadata.length), .text(revision.documentID), .text(rev))
            }
        }
    }

    /// Forgets, in the caller's transaction, the set-aside copies of revisions now written: a
    /// revision set aside by one session (its content was not here yet) that another peer then
    /// sent once the content was here is in the tree, and its copy waits for nothing. Only
    /// revisions naming content can have one, so the others cost nothing.
    static func forgetSetAside(_ written: [CheckedRevision], _ db: Database) throws {
        for revision in written where revision.namesAttachments {
            let rev = revision.path.leaf.description
            try db.run("DELETE FROM awaiting_revisions WHERE doc_id = ? AND rev = ?", .text(revision.documentID), .text(rev))
            try db.run("DELETE FROM awaiting_digests WHERE doc_id = ? AND rev = ?", .text(revision.documentID), .text(rev))
        }
    }

    /// Revisions set aside and not yet settled.
    public func awaitingContentCount() throws(StoreError) -> Int {
        try read { db in Int(try db.scalarInt("SELECT count(*) FROM awaiting_revisions") ?? 0) }
    }

    /// The revisions of `documentID` set aside for their content, oldest generation first.
    public func setAsideRevisions(of documentID: String) throws(StoreError) -> [RevisionID] {
        try read { db in
            try db.query("SELECT rev FROM awaiting_revisions WHERE doc_id = ?", [.text(documentID)]) { RevisionID($0.text(0)) }
        }.compactMap { $0 }.sorted()
    }

    /// The content set-aside revisions wait for and that is not here for this database
    /// (`holdsAttachment(_:length:)`: a copy other databases named is fetched again), by digest.
    public func awaitedAttachments() throws(StoreError) -> [AwaitedAttachment] {
        let rows = try read { db in
            try db.query("SELECT digest, max(length) FROM awaiting_digests GROUP BY digest ORDER BY digest") { row in
                (row.blob(0) ?? [], row.int64(1))
            }
        }
        return rows.compactMap { bytes, length in
            guard bytes.count == AttachmentDigest.byteCount else { return nil }
            let digest = AttachmentDigest(bytes: bytes)
            return holdsAttachment(digest, length: length) ? nil : AwaitedAttachment(digest: digest, length: length)
        }
    }

    /// A counter that grows each time a write sets revisions aside: a replicator compares it with
    /// the value it last saw to learn there is content to fetch, without a query per batch.
    public var setAsideCount: Int { setAsideCounter.load(ordering: .acquiring) }

    func noteSetAside() {
        setAsideCounter.add(1, ordering: .releasing)
    }

    /// Merges the set-aside revisions whose content is now all here for this database, at most
    /// `limit` of them, and removes their rows, in one transaction; `policy` (or the store's)
    /// settles the conflicts they create. `digests` is content a fetch of this database just
    /// completed and verified against its digest (or found this database holds already): it
    /// becomes this database's (`namesAttachment(_:)`), and the search is narrowed to the
    /// revisions waiting for it; nil looks at every set-aside revision. Returns one result per
    /// document written, and whether more revisions may be ready (call again).
    public func settleAwaitingContent(
        digests: [AttachmentDigest]? = nil, policy: ConflictPolicy? = nil, limit: Int = StoreLimits.foreignBatchCountMax
    ) throws(StoreError) -> (results: [ForeignDocumentResult], more: Bool) {
        let policy = policy ?? conflictPolicy
        let attachments = attachments
        let fetched = Set(digests ?? [])
        return try write { context in
            let db = context.db
            // Content a fetch of this database verified (or that it named already) is its own,
            // whether or not a revision merged below is stored with a body naming it.
            try RevisionRows.insertAttachmentNames(db, fetched.filter { attachments.contains($0) })
            var candidates: [(doc: String, rev: String)] = []
            if let digests {
                var seen = Set<String>()
                for digest in digests {
                    for key in try db.query("SELECT doc_id, rev FROM awaiting_digests WHERE digest = ?", [.blob(digest.bytes)], row: { ($0.text(0), $0.text(1)) })
                    where seen.insert(key.0 + "\u{0}" + key.1).inserted {
                        candidates.append((key.0, key.1))
                    }
                }
            } else {
                candidates = try db.query("SELECT doc_id, rev FROM awaiting_revisions ORDER BY doc_id, rev") { ($0.text(0), $0.text(1)) }
            }
            var ready: [CheckedRevision] = []
            var more = false
            for candidate in candidates {
                let needs = try db.query(
                    "SELECT digest, length FROM awaiting_digests WHERE doc_id = ? AND rev = ?", [.text(candidate.doc), .text(candidate.rev)]
                ) { ($0.blob(0) ?? [], $0.int64(1)) }
                // Content here for other databases only waits for its fetch.
                let complete = try needs.allSatisfy { bytes, length in
                    guard bytes.count == AttachmentDigest.byteCount else { return false }
                    let digest = AttachmentDigest(bytes: bytes)
                    return try attachments.contains(digest, length: length) && Self.namesAttachment(db, digest)
                }
                guard complete else { continue }
                guard ready.count < limit else {
                    more = true
                    break
                }
                guard let revision = try Self.loadAwaiting(db, documentID: candidate.doc, rev: candidate.rev) else { continue }
                ready.append(revision)
                try db.run("DELETE FROM awaiting_revisions WHERE doc_id = ? AND rev = ?", .text(candidate.doc), .text(candidate.rev))
                try db.run("DELETE FROM awaiting_digests WHERE doc_id = ? AND rev = ?", .text(candidate.doc), .text(candidate.rev))
            }
            guard !ready.isEmpty else { return ([], more) }
            let results = try Self.mergeAll(context, ready, DocumentGroups(ready), policy: policy)
            return (results, more)
        }
    }

    /// One set-aside revision, as it was checked when its batch arrived.
    private static func loadAwaiting(_ db: Database, documentID: String, rev: String) throws -> CheckedRevision? {
        try db.queryFirst(
            "SELECT ancestors, root_parent, kind, imported, body FROM awaiting_revisions WHERE doc_id = ? AND rev = ?",
            [.text(documentID), .text(rev)]
        ) { row throws -> CheckedRevision in
            let damaged = StoreError.corrupt(detail: "set-aside revision \(rev) of \"\(documentID.prefix(80))\" cannot be read")
            guard let leaf = RevisionID(rev), let kind = RevisionKind(rawValue: UInt8(truncatingIfNeeded: row.int(2))) else { throw damaged }
            var ancestors: [RevisionID] = []
            for text in row.text(0).split(separator: " ") {
                guard let id = RevisionID(text) else { throw damaged }
                ancestors.append(id)
            }
            var rootParent: RevisionID?
            if !row.isNull(1) {
                guard let id = RevisionID(row.text(1)) else { throw damaged }
                rootParent = id
            }
            let path: RevisionPath
            do { path = try RevisionPath(leaf: leaf, kind: kind, ancestors: ancestors, rootParent: rootParent) } catch { throw damaged }
            return CheckedRevision(
                documentID: documentID, path: path, body: row.blob(4) ?? [], importedID: row.int(3) != 0, namesAttachments: true)
        }
    }
}

extension DocumentStore {
    /// Refuses the set-aside revisions waiting for `digest` (the content a peer sent does not
    /// match it): their rows are removed, and the documents they belonged to are returned, so
    /// the refusal can be counted and reported. The peer's next pass offers them again.
    public func refuseAwaiting(digest: AttachmentDigest) throws(StoreError) -> [String] {
        try write { context in
            let keys = try context.db.query("SELECT doc_id, rev FROM awaiting_digests WHERE digest = ?", [.blob(digest.bytes)]) {
                ($0.text(0), $0.text(1))
            }
            for (doc, rev) in keys {
                try context.db.run("DELETE FROM awaiting_revisions WHERE doc_id = ? AND rev = ?", .text(doc), .text(rev))
                try context.db.run("DELETE FROM awaiting_digests WHERE doc_id = ? AND rev = ?", .text(doc), .text(rev))
            }
            var seen = Set<String>()
            return keys.map(\.0).filter { seen.insert($0).inserted }
        }
    }

    /// Opens or resumes the fetch of `digest` into this store's attachment directory.
    public func beginDownload(_ digest: AttachmentDigest, length: Int64) throws(StoreError) -> AttachmentDownload {
        try attachments.beginDownload(digest, length: length)
    }

    /// Opens or resumes the fetch of `digest`, or nil while another download of the process
    /// fetches it (`AttachmentStore.beginDownloadUnlessFetching(_:length:)`).
    public func beginDownloadUnlessFetching(_ digest: AttachmentDigest, length: Int64) throws(StoreError) -> AttachmentDownload? {
        try attachments.beginDownloadUnlessFetching(digest, length: length)
    }

    /// Whether the content `digest` of `length` bytes is stored whole and this database's
    /// (`namesAttachment(_:)`): content a peer need not be asked for. Content the directory holds
    /// for other databases only is fetched from the peer (`DocumentStore+AttachmentNames`).
    /// A failed read counts as not this database's: the content is then fetched again, and the
    /// failure logged.
    public func holdsAttachment(_ digest: AttachmentDigest, length: Int64) -> Bool {
        guard attachments.contains(digest, length: length) else { return false }
        do {
            return try namesAttachment(digest)
        } catch {
            logger.warning("reading which attachment content the database names failed; fetching it", metadata: ["digest": "\(digest)", "error": "\(error)"])
            return false
        }
    }

    /// Makes verified downloads durable and names them (`AttachmentStore.publish(_:)`).
    public func publishDownloads(_ digests: [AttachmentDigest]) throws(StoreError) {
        try attachments.publish(digests)
    }

    /// A part of the content named `digest`, for a peer replicating this database
    /// (`AttachmentStore.part(of:offset:maxBytes:)`); nil when it is not here, or when no revision
    /// of this database names it (`namesAttachment(_:)`): content other databases sharing the
    /// attachment directory name is not this database's to send.
    public func attachmentPart(of digest: AttachmentDigest, offset: Int64, maxBytes: Int) throws(StoreError) -> (length: Int64, bytes: [UInt8])? {
        guard try namesAttachment(digest) else { return nil }
        return try attachments.part(of: digest, offset: offset, maxBytes: maxBytes)
    }
}
