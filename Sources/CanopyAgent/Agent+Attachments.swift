import CanopyAdmin
import CanopyCore
import CanopyStore
import Dispatch
import Logging

/// Attachment commands (Protocol/admin-v1.md §6, *Attachments*): `attach` uploads content and
/// writes a revision naming it, `attachment` sends content after its response line, `detach`
/// writes a revision without one. Content is streamed between the socket and the attachment
/// directory a part at a time, never held whole in memory.
extension Agent {
    /// The content type of an attachment whose upload names none (CouchDB's default for bytes).
    static let defaultContentType = "application/octet-stream"

    /// Checks an `attach` line before its bytes: the arguments, the database, the size limit, and
    /// the revision it replaces (so a stale one is refused before the content is sent). Runs on
    /// the client's queue; the store checks run on `storeQueue`.
    func beginUpload(_ command: Admin.Attach) -> Result<any AdminUploadSink, AdminFailure> {
        do {
            let target = try AttachTarget(command)
            let upload = try storeQueue.sync { () throws -> AttachmentUpload in
                let database = try database(named: target.command.db)
                try target.checkReplaceable(in: database.store)
                return try database.store.attachments.beginUpload(length: command.length, from: "attachment \"\(target.name.prefix(80))\"")
            }
            return .success(UploadSink(upload))
        } catch let failure as AdminFailure {
            return .failure(failure)
        } catch let error as StoreError {
            return .failure(Self.attachmentFailure(error))
        } catch {
            return .failure(AdminFailure(.failed, "\(error)"))
        }
    }

    /// `attach`, once its content is stored: a new revision of the document with the attachment
    /// added or replaced. Runs on `storeQueue`.
    func attach(_ command: Admin.Attach, uploaded: UploadedContent) throws -> Admin.Attach.Reply {
        let target = try AttachTarget(command)
        let database = try database(named: target.command.db)
        let contentType = target.command.contentType ?? Self.defaultContentType
        let metadata = AttachmentMetadata(
            contentType: contentType, length: uploaded.length, digest: uploaded.digest, revpos: (target.rev?.generation ?? 0) + 1)
        let revision = try changeAttachments(target.id, replacing: target.rev, database) { $0[target.name] = metadata }
        // Compaction may remove the content from here on only if no revision names it.
        uploaded.pin?.release()
        return Admin.Attach.Reply(
            doc: target.id, rev: revision, name: target.name, digest: uploaded.digest.description, length: uploaded.length)
    }

    /// `detach`: a new revision of the document without the attachment. Runs on `storeQueue`.
    func detach(_ command: Admin.Detach) throws -> Admin.WriteReply {
        let database = try database(named: command.db)
        let (id, name, rev) = (command.doc, command.name, command.rev)
        let revision = try changeAttachments(id, replacing: rev, database) { attachments in
            guard attachments.removeValue(forKey: name) != nil else {
                throw AdminFailure(.notFound, "not found: \"\(id.prefix(80))\" at \(rev) has no attachment \"\(name.prefix(80))\"")
            }
        }
        return Admin.WriteReply(doc: id, rev: revision)
    }

    /// Writes a revision of `id` replacing `rev` (nil: a new document) whose attachments are those
    /// of `rev` changed by `change`, and reports it as a local change.
    private func changeAttachments(
        _ id: String, replacing rev: RevisionID?, _ database: OpenDatabase,
        _ change: (inout [String: AttachmentMetadata]) throws -> Void
    ) throws -> RevisionID {
        let body = try rev.map { try database.store.get(id: id, rev: $0).body } ?? .object([:])
        var attachments: [String: AttachmentMetadata]
        do { attachments = try Attachments.metadata(in: body) } catch {
            throw AdminFailure(.failed, "document \"\(id.prefix(80))\" at \(rev.map(\.description) ?? "-"): stored attachments unreadable: \(error)")
        }
        try change(&attachments)
        let revision = try database.store.put(id: id, body: Attachments.body(body, with: attachments), replacing: rev)
        events.emit(.localChange(db: database.name.text, doc: id, rev: revision))
        return revision
    }

    /// `attachment`: the response names the content (`doc`, `rev`, `name`, `content_type`,
    /// `length`, `digest`) and its `length` bytes follow the line.
    func handleDownload(_ request: AdminRequest, reply: @escaping @Sendable (Result<AdminDownload, AdminFailure>) -> Void) {
        storeQueue.async { [self] in
            do {
                let command = try request.decode(Admin.GetAttachment.self)
                let database = try database(named: command.db)
                let (id, name) = (command.doc, command.name)
                let document = try command.rev.map { try database.store.get(id: id, rev: $0) } ?? database.store.get(id: id)
                let attachments: [String: AttachmentMetadata]
                do { attachments = try Attachments.metadata(in: document.body) } catch {
                    throw AdminFailure(.failed, "document \"\(id.prefix(80))\": stored attachments unreadable: \(error)")
                }
                guard let metadata = attachments[name] else {
                    throw AdminFailure(.notFound, "not found: \"\(id.prefix(80))\" at \(document.revision) has no attachment \"\(name.prefix(80))\"")
                }
                // Pinned before it is opened, until the body is sent: compaction leaves it alone.
                let pin = database.store.attachments.pin(metadata.digest)
                let reader = try AttachmentReader(database.store.attachments, digest: metadata.digest, length: metadata.length)
                let members = try AdminResponseLine.members(of: Admin.GetAttachment.Reply(
                    doc: id, rev: document.revision, name: name, contentType: metadata.contentType, length: metadata.length,
                    digest: metadata.digest.description)).get()
                reply(.success(AdminDownload(members: members, body: AttachmentBody(reader, pin: pin) { [weak self] reason in
                    // Damaged content is made visible as damaged documents are (status, event, log).
                    self?.storeFoundDamage(
                        StoredDamage(documentID: id, revision: document.revision, reason: "attachment \"\(name.prefix(80))\": \(reason)"),
                        in: database.name)
                })))
            } catch let failure as AdminFailure {
                reply(.failure(failure))
            } catch let error as StoreError {
                reply(.failure(Self.attachmentFailure(error)))
            } catch {
                reply(.failure(AdminFailure(.failed, "\(error)")))
            }
        }
    }

    /// `compact`: drops the bodies no one needs from `db` (every database when absent), then
    /// removes the attachment content no revision of any database names and nothing pinned
    /// during the collection (an upload whose revision is not written yet, a download being
    /// sent). Runs on `storeQueue`: document commands wait for it.
    func compact(_ command: Admin.Compact) throws -> Admin.Compact.Reply {
        let named = try command.db.map { (name) throws(AdminFailure) in try database(named: name) }
        let all = databases.sorted
        let compacted = all.filter { named == nil || named?.name == $0.key }
        var dropped = 0
        for (_, store) in compacted { dropped += try store.compact() }
        let report = try DocumentStore.collectAttachmentGarbage(of: all.map(\.value))
        return Admin.Compact.Reply(
            databases: compacted.map(\.key.text), bodiesDropped: Int64(dropped), attachmentsRemoved: Int64(report.removedFiles),
            attachmentBytesFreed: report.freedBytes, attachmentsKept: Int64(report.namedFiles), attachmentsPinned: Int64(report.pinnedFiles))
    }

    /// A store error of an attachment command: content over the size limit is `invalid_argument`,
    /// the rest as for documents.
    private static func attachmentFailure(_ error: StoreError) -> AdminFailure {
        if case .attachment(let detail) = error, detail.contains("(the size limit)") { return AdminFailure(.invalidArgument, detail) }
        return failure(for: error)
    }
}

/// The document and attachment an `attach` names, checked.
private struct AttachTarget {
    let command: Admin.Attach
    var id: String { command.doc }
    var name: String { command.name }
    var rev: RevisionID? { command.rev }

    init(_ command: Admin.Attach) throws(AdminFailure) {
        self.command = command
        let id = command.doc
        if DocumentMembers.isLocal(id) {
            throw AdminFailure(.invalidArgument, "\"\(id.prefix(80))\" is a local document: local documents have no attachments")
        }
        if let problem = Attachments.problem(withName: name) { throw AdminFailure(.invalidArgument, problem) }
        if let type = command.contentType, type.utf8.count > Attachments.contentTypeBytesMax || type.isEmpty {
            throw AdminFailure(.invalidArgument, "content_type must be 1 to \(Attachments.contentTypeBytesMax) bytes")
        }
    }

    /// Refuses, before any content is sent, a `rev` that is not an open leaf of the document, or
    /// a missing `rev` for a document that exists (CouchDB's rule: a new attachment on an
    /// existing document names the revision it changes).
    func checkReplaceable(in store: DocumentStore) throws {
        guard let rev else {
            guard let current = try? store.get(id: id) else { return }
            throw AdminFailure(.conflict, "conflict on \"\(id.prefix(80))\": the document exists (current revision \(current.revision)); give its revision (--rev) to attach to it")
        }
        let document = try store.get(id: id, options: .conflicts)
        guard rev == document.revision || (document.conflicts ?? []).contains(rev) else {
            throw AdminFailure(.conflict, "conflict on \"\(id.prefix(80))\": \(rev) is not a current revision; current is \(document.revision)")
        }
    }
}

/// An upload's bytes on their way into the attachment directory (`AttachmentUpload`); used on
/// the client's queue only.
private final class UploadSink: AdminUploadSink {
    private let upload: AttachmentUpload

    init(_ upload: AttachmentUpload) { self.upload = upload }

    func write(_ part: UnsafeRawBufferPointer) throws(AdminFailure) {
        do { try upload.write(part) } catch { throw AdminFailure(.failed, error.description) }
    }

    func finish() throws(AdminFailure) -> UploadedContent {
        do {
            let stored = try upload.finishPinned()
            return UploadedContent(digest: stored.digest, length: stored.length, pin: stored.pin)
        } catch {
            throw AdminFailure(.failed, error.description)
        }
    }
}

/// Stored content sent after an `attachment` response. Made on `storeQueue`, then handed to the
/// client's queue, the only one that reads it: one owner at a time.
/// Content that fails its check is reported to `damaged` (with the reason) before the body is cut.
/// The content stays pinned until the body is released.
private final class AttachmentBody: AdminBodySource, @unchecked Sendable {
    private let reader: AttachmentReader
    private let pin: AttachmentPin
    private let damaged: @Sendable (String) -> Void

    init(_ reader: AttachmentReader, pin: AttachmentPin, damaged: @escaping @Sendable (String) -> Void) {
        self.reader = reader
        self.pin = pin
        self.damaged = damaged
    }

    deinit { pin.release() }

    func next() throws(AdminFailure) -> [UInt8]? {
        do { return try reader.next() } catch {
            damaged(error.description)
            throw AdminFailure(.failed, error.description)
        }
    }
}

extension Agent {
    /// Removes the `incoming-` files of uploads a killed agent left in the attachment directory.
    /// Called holding `DIR/canopyd.lock`, before any store opens: no upload runs yet and no other
    /// agent can, so every such file is a leftover (a clean shutdown leaves none). Logged with
    /// their number and size, so a crash that cost disk space says so.
    static func removeUploadLeftovers(in directory: DataDirectory, logger: Logger) {
        let removed = AttachmentStore(directory: directory.attachmentsPath).removeIncoming()
        guard !removed.isEmpty else { return }
        let bytes = removed.reduce(Int64(0)) { $0 + $1.bytes }
        logger.notice(
            "removed \(removed.count) unfinished attachment upload\(removed.count == 1 ? "" : "s") (\(bytes) bytes) left by an agent that stopped during the upload",
            metadata: ["directory": "\(directory.attachmentsPath)"])
    }
}
