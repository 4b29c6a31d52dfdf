import CSQLite
import CanopyCore

/// What is wrong with input handed to the store. Every case names the document (when there is
/// one) and what is wrong, so a replication error or an import report can point at the culprit.
/// When one of these is thrown, nothing of the call's batch has been written.
public enum StoreInputError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The document the problem is about, when there is one.
    public var documentID: String? {
        switch self {
        case .invalidJSON(let id, _), .bodyNotObject(let id), .bodyTooLarge(let id, _, _),
            .malformedRevisionID(let id, _), .invalidCouchDocument(let id, _), .invalidAttachments(let id, _):
            return id
        case .bodyNotCanonical(let id, _), .invalidHistory(let id, _), .revisionHashMismatch(let id, _, _):
            return id
        case .emptyDocumentID, .documentIDTooLong, .documentIDNotUTF8, .batchTooLarge:
            return nil
        }
    }

    /// The body is not JSON.
    case invalidJSON(documentID: String?, detail: String)
    /// The body is JSON but not an object.
    case bodyNotObject(documentID: String?)
    /// The body's bytes are valid JSON but not in canonical form (replication input must be).
    case bodyNotCanonical(documentID: String, detail: String)
    /// The body is larger than `StoreLimits.bodyBytesMax`.
    case bodyTooLarge(documentID: String?, bytes: Int, limit: Int)
    /// The document id is empty.
    case emptyDocumentID
    /// The document id is longer than its limit, in UTF-8 bytes.
    case documentIDTooLong(bytes: Int, limit: Int)
    /// The document id's bytes are not valid UTF-8.
    case documentIDNotUTF8
    /// A revision id is not `N-H` with a 32-hex-digit digest.
    case malformedRevisionID(documentID: String?, text: String)
    /// A revision history skips a generation, has the wrong generation, or is too long.
    case invalidHistory(documentID: String, detail: String)
    /// A foreign revision's id is not the hash of its parent, kind and body: the peer lied.
    case revisionHashMismatch(documentID: String, claimed: RevisionID, computed: RevisionID)
    /// A batch holds more items than its limit.
    case batchTooLarge(count: Int, limit: Int)
    /// A CouchDB JSON document lacks a field it needs or has one of the wrong type.
    case invalidCouchDocument(documentID: String?, detail: String)
    /// A body's `_attachments` member is malformed, or names content this node does not hold
    /// (a revision is written only with all of its attachments' content already here).
    case invalidAttachments(documentID: String?, detail: String)

    public var description: String {
        let name: (String?) -> String = { id in id.map { "document \"\($0.prefix(80))\": " } ?? "" }
        switch self {
        case .invalidJSON(let id, let detail): return "\(name(id))invalid JSON: \(detail)"
        case .bodyNotObject(let id): return "\(name(id))body is not a JSON object"
        case .bodyNotCanonical(let id, let detail): return "\(name(id))body is not canonical JSON: \(detail)"
        case .bodyTooLarge(let id, let bytes, let limit):
            return "\(name(id))body is \(bytes) bytes of canonical JSON, over the limit of \(limit) bytes (\(limit >> 20) MiB) that holds on every path (put, import, replication); split the document or keep large content elsewhere"
        case .emptyDocumentID: return "document id is empty"
        case .documentIDTooLong(let bytes, let limit): return "document id of \(bytes) bytes exceeds \(limit)"
        case .documentIDNotUTF8: return "document id is not valid UTF-8"
        case .malformedRevisionID(let id, let text): return "\(name(id))malformed revision id \"\(text.prefix(80))\""
        case .invalidHistory(let id, let detail): return "\(name(id))invalid revision history: \(detail)"
        case .revisionHashMismatch(let id, let claimed, let computed):
            return "\(name(id))revision \(claimed) does not match its content (computed \(computed))"
        case .batchTooLarge(let count, let limit): return "batch of \(count) items exceeds \(limit)"
        case .invalidCouchDocument(let id, let detail): return "\(name(id))invalid CouchDB document: \(detail)"
        case .invalidAttachments(let id, let detail): return "\(name(id))\(detail)"
        }
    }
}

/// Errors from the document store.
public enum StoreError: Error, CustomStringConvertible {
    /// A local write named a revision that is not an open leaf of the document (optimistic
    /// concurrency), or created a document that already exists. `current` is the current revision.
    case conflict(documentID: String, replacing: RevisionID?, current: RevisionID?)
    /// No such document, or no such revision of it.
    case notFound(documentID: String, revision: RevisionID?)
    /// The revision exists but its body was dropped by compaction or stemming.
    case bodyUnavailable(documentID: String, revision: RevisionID)
    /// The input was rejected; nothing was written.
    case invalidInput(StoreInputError)
    /// The file was written by a newer version of Canopy.
    case schemaTooNew(path: String, found: Int, supported: Int)
    /// The file holds data this build cannot read (a bug or outside tampering).
    case corrupt(detail: String)
    /// One document or revision in the file is damaged (`StoredDamage`); the rest is readable.
    /// The store reported it through its damage handler.
    case damaged(StoredDamage)
    /// SQLite failed (disk full, I/O error, busy, …).
    case sqlite(SQLiteError)
    /// A conflict handler or resolver passed by the caller threw.
    case handlerFailed(documentID: String, underlying: any Error)
    /// Attachment content could not be stored or read (`AttachmentStore`): the message names the
    /// file and the reason.
    case attachment(String)

    /// The description without the kind's prefix where the caller already names it: for
    /// `attachment`, the detail alone.
    public var detail: String {
        if case .attachment(let detail) = self { return detail }
        return description
    }

    public var description: String {
        switch self {
        case .conflict(let id, let replacing, let current):
            let base = replacing.map { "revision \($0)" } ?? "no revision (a new document)"
            let now = current.map { "the current revision is \($0)" } ?? "the document does not exist"
            return "conflict on \"\(id.prefix(80))\": the write was based on \(base) but \(now)"
        case .notFound(let id, let revision):
            return "not found: \"\(id.prefix(80))\"\(revision.map { " revision \($0)" } ?? "")"
        case .bodyUnavailable(let id, let revision): return "body of \"\(id.prefix(80))\" \(revision) was compacted away"
        case .invalidInput(let error): return error.description
        case .schemaTooNew(let path, let found, let supported):
            return "\(path) has schema version \(found), newer than this build's \(supported); upgrade Canopy to open it"
        case .corrupt(let detail): return "database corrupt: \(detail)"
        case .damaged(let damage):
            return "stored document \"\(damage.documentID.prefix(80))\"\(damage.revision.map { " revision \($0)" } ?? "") is damaged: \(damage.reason)"
        case .sqlite(let error): return error.description
        case .handlerFailed(let id, let underlying): return "handler for \"\(id.prefix(80))\" failed: \(underlying)"
        case .attachment(let detail): return "attachment: \(detail)"
        }
    }

    /// Wraps any error thrown inside the store as a `StoreError`.
    /// True when SQLite found the file damaged (`SQLITE_CORRUPT`, `SQLITE_NOTADB`) or the store
    /// found it inconsistent: what a check reports as a problem, not as a failure to run.
    public var isCorruption: Bool {
        switch self {
        case .corrupt: true
        case .sqlite(let error): error.code == SQLITE_CORRUPT || error.code == SQLITE_NOTADB
        default: false
        }
    }

    static func wrap(_ error: any Error) -> StoreError {
        switch error {
        case let error as StoreError: return error
        case let error as SQLiteError: return .sqlite(error)
        case let error as StoreInputError: return .invalidInput(error)
        default: return .corrupt(detail: "unexpected error: \(error)")
        }
    }
}
