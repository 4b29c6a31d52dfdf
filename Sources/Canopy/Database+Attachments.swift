import CanopyCore
import CanopyStore
import Foundation

/// Attachments: binary content a document carries, kept apart from its JSON (CouchDB's model).
///
/// A revision names its attachments in its `_attachments` member (name → content type, length,
/// digest, `revpos`, `stub: true`), which is part of what its revision id hashes; the content is
/// stored once per digest in the database's attachment directory (`PATH-attachments` beside the
/// file, or the node's `attachments` directory), streamed in and out in 1 MiB parts, never held
/// whole in memory. Adding, replacing and removing an attachment saves a new revision, with the
/// same concurrency control as `save`. Attachments do not replicate yet: a peer refuses a
/// revision that has any, and reports it.
///
/// Content no kept revision names any more (after `detach`, or once ``compact()`` dropped the
/// old revisions naming it) stays on disk until ``compactAttachments()`` removes it. Content
/// being attached or read is pinned and never removed meanwhile.
extension Database {
    /// The attachments of the current revision of `id`, by name: empty when it has none; nil
    /// when the document does not exist or is deleted.
    public func attachments(of id: String) throws(DatabaseError) -> [String: AttachmentMetadata]? {
        guard let document = try document(id: id) else { return nil }
        do { return try Attachments.metadata(in: document.body) } catch {
            throw .storageFailed(detail: "stored document \"\(id.prefix(80))\": \(error)")
        }
    }

    /// Stores the content of the file at `file` and saves a new revision of `id`, on top of
    /// `replacing`, whose attachment `name` is that content (added, or replacing one of that
    /// name); returns the new revision. The content is stored first (hashed as it is copied,
    /// synced, then named by its digest), so the revision never names content that is not
    /// whole. A stale `replacing` is handled by `concurrency` as `save` handles it, the
    /// attachment then added to what `.lastWriteWins` or the handler saves. Content over the
    /// size limit (4 GiB; a node's `attachment-size-limit`) is refused
    /// before any of it is stored. The content is pinned from before it is named by its digest
    /// until the revision has committed, so a concurrent `compactAttachments()` cannot remove
    /// it in between.
    @discardableResult
    public func attach(
        _ name: String, to id: String, contentsOf file: URL, contentType: String, replacing: RevisionID,
        concurrency: WriteConcurrency = .failOnConflict
    ) throws(DatabaseError) -> RevisionID {
        if let problem = Attachments.problem(withName: name) { throw .invalidDocument(documentID: id, reason: problem) }
        let stored: (digest: AttachmentDigest, length: Int64, pin: AttachmentPin)
        do { stored = try store.attachments.addPinned(contentsOf: file.path) } catch { throw DatabaseError(error, documentID: id) }
        defer { stored.pin.release() }
        return try edit(id, replacing: replacing, concurrency: concurrency) { attachments, generation in
            attachments[name] = AttachmentMetadata(contentType: contentType, length: stored.length, digest: stored.digest, revpos: generation)
        }
    }

    /// Saves a new revision of `id`, on top of `replacing`, without attachment `name`; returns
    /// the new revision. Throws `DatabaseError.notFound` when `replacing` has no such attachment.
    /// The content stays stored until compaction finds no revision naming it.
    @discardableResult
    public func detach(
        _ name: String, from id: String, replacing: RevisionID, concurrency: WriteConcurrency = .failOnConflict
    ) throws(DatabaseError) -> RevisionID {
        let current = try body(of: id, revision: replacing)
        let named: [String: AttachmentMetadata]
        do { named = try Attachments.metadata(in: current) } catch { throw .invalidDocument(documentID: id, reason: error.description) }
        guard named[name] != nil else {
            throw .notFound(documentID: "\(id)/\(name)", revision: replacing)
        }
        return try edit(id, replacing: replacing, concurrency: concurrency) { attachments, _ in attachments[name] = nil }
    }

    /// The file holding the content of attachment `name` of the current revision of `id`: read
    /// it, never change it (other revisions and documents may name the same content).
    ///
    /// The path stays valid while some kept revision names the content: once none does (the
    /// document changed or was deleted, and its old revisions compacted), the next
    /// `compactAttachments()` may remove the file, even while it is open elsewhere (an open
    /// descriptor still reads it whole). To keep it for longer whatever happens to the
    /// document, copy it, or read it with `attachmentContents(_:of:)`, which pins the content
    /// for its whole read.
    public func attachmentFile(_ name: String, of id: String) throws(DatabaseError) -> URL {
        let metadata = try attachment(name, of: id)
        return URL(fileURLWithPath: store.attachments.path(of: metadata.digest))
    }

    /// The content of attachment `name` of the current revision of `id`, in parts of at most
    /// 1 MiB, checked against its digest: content that no longer matches (a damaged disk) ends
    /// the sequence with `DatabaseError.attachmentFailed` after the last part. The content is
    /// pinned from this call until the sequence ends, so compaction never removes it mid-read.
    public func attachmentContents(_ name: String, of id: String) throws(DatabaseError) -> AsyncThrowingStream<[UInt8], any Error> {
        let digest = try attachment(name, of: id).digest
        let attachments = store.attachments
        let pin = attachments.pin(digest)
        return AsyncThrowingStream { continuation in
            let reader = Thread {
                defer { pin.release() }
                do {
                    try attachments.read(digest) { part in
                        // A reader that stopped listening ends the read at the next part.
                        guard case .enqueued = continuation.yield(Array(part)) else { throw CancellationError() }
                    }
                    continuation.finish()
                } catch is CancellationError {
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: DatabaseError.attachmentFailed(documentID: id, detail: "\(error)"))
                }
            }
            reader.start()
        }
    }

    /// Removes the attachment content no revision of this database names any more, keeping
    /// content pinned by an attach or a read in progress, and reports what it removed. Bodies of
    /// old revisions still stored count as naming their content: run `compact()` first to
    /// drop them and free what only they named.
    ///
    /// Throws `DatabaseError.invalidConfiguration`, removing nothing, for a database whose
    /// attachment directory others may share (a `Node`'s databases share the node's): collect it
    /// with every database sharing the directory, through `compactAttachments(of:)`.
    public func compactAttachments() throws(DatabaseError) -> AttachmentGarbageReport {
        guard store.ownsAttachmentDirectory else {
            throw .invalidConfiguration(
                "the attachment directory \(store.attachments.directory) may be shared with other databases; compact it with every database that uses it (Database.compactAttachments(of:))")
        }
        return try Self.compactAttachments(of: [self])
    }

    /// Removes the attachment content that no revision of any of `databases` names from the
    /// directory they share, keeping pinned content, and reports what it removed. `databases`
    /// must be every database open in this process whose content lives in that directory (for
    /// a `Node`, each of its databases): content named only by one left out would be removed.
    /// Throws `DatabaseError.attachmentFailed` when `databases` is empty or they keep content in
    /// different directories.
    public static func compactAttachments(of databases: [Database]) throws(DatabaseError) -> AttachmentGarbageReport {
        do { return try DocumentStore.collectAttachmentGarbage(of: databases.map(\.store)) } catch {
            throw DatabaseError(error, documentID: nil)
        }
    }

    /// Attachment `name` of the current revision of `id`; `DatabaseError.notFound` names
    /// `id/name` when there is no such document or attachment.
    private func attachment(_ name: String, of id: String) throws(DatabaseError) -> AttachmentMetadata {
        guard let metadata = try attachments(of: id)?[name] else { throw .notFound(documentID: "\(id)/\(name)", revision: nil) }
        return metadata
    }

    /// The body of revision `revision` of `id`.
    private func body(of id: String, revision: RevisionID) throws(DatabaseError) -> JSONValue {
        do { return try store.get(id: id, rev: revision).body } catch { throw DatabaseError(error, documentID: id) }
    }

    /// Saves, on top of `replacing`, its body with its attachments changed by `change` (given
    /// the new revision's generation); a stale `replacing` goes to `concurrency`, whose body (the
    /// current one for `.lastWriteWins`) gets the same change.
    private func edit(
        _ id: String, replacing: RevisionID, concurrency: WriteConcurrency,
        _ change: @escaping @Sendable (inout [String: AttachmentMetadata], Int) -> Void
    ) throws(DatabaseError) -> RevisionID {
        let changed = { @Sendable (body: JSONValue, parentGeneration: Int) throws -> JSONValue in
            var attachments = try Attachments.metadata(in: body)
            change(&attachments, parentGeneration + 1)
            return Attachments.body(body, with: attachments)
        }
        let proposed: JSONValue
        do { proposed = try changed(try body(of: id, revision: replacing), replacing.generation) } catch let error as DatabaseError {
            throw error
        } catch {
            throw .invalidDocument(documentID: id, reason: "\(error)")
        }
        let resolved: WriteConcurrency
        switch concurrency {
        case .failOnConflict: resolved = .failOnConflict
        case .lastWriteWins:
            resolved = .handler { conflict in try changed(conflict.current.isDeleted ? .emptyObject : conflict.current.body, conflict.current.revision.generation) }
        case .handler(let handler):
            resolved = .handler { conflict in
                try handler(conflict).map { body in try changed(body, conflict.current.revision.generation) }
            }
        }
        return try save(json: proposed, id: id, replacing: replacing, concurrency: resolved)
    }
}
