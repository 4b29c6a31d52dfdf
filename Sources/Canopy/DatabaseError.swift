import CanopyCore
import CanopyStore

/// What went wrong in a `Database` call. Each case names the document when there is one and says
/// what happened in words an application can log or show; nothing of a failed write is written.
public enum DatabaseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A write named a revision that is not the document's current one (someone else saved in
    /// between), or created a document that already exists. `current` is the revision to merge
    /// with and save on top of; nil when the document does not exist.
    case conflict(documentID: String, replacing: RevisionID?, current: RevisionID?)
    /// No such document (or no such revision of it).
    case notFound(documentID: String, revision: RevisionID?)
    /// The store refused the document: not a JSON object, too large, nested too deep, an empty
    /// or too long id, a number JSON cannot hold exactly. `reason` is the store's own words.
    case invalidDocument(documentID: String?, reason: String)
    /// The value could not be encoded as JSON (`JSONEncoder`'s error, described).
    case encodingFailed(documentID: String, detail: String)
    /// The stored JSON could not be decoded as the requested type (`JSONDecoder`'s error,
    /// described): the type does not match what was saved under this id.
    case decodingFailed(documentID: String, revision: RevisionID, detail: String)
    /// A conflict handler or resolver the caller passed threw, or decided something impossible;
    /// nothing was written.
    case handlerFailed(documentID: String, detail: String)
    /// The database file could not be read or written: disk full, I/O error, a file damaged or
    /// written by a newer Canopy, a body compacted away. `detail` is the store's description.
    case storageFailed(detail: String)
    /// The configuration passed to `Database.init` cannot be used.
    case invalidConfiguration(String)
    /// Attachment content could not be stored or read: the source file is missing or over the
    /// size limit, the disk failed, or stored content no longer matches its digest. Nothing of
    /// the write was written.
    case attachmentFailed(documentID: String?, detail: String)

    /// One line saying what happened, naming the document.
    public var description: String {
        let name: (String) -> String = { "\"\($0.prefix(80))\"" }
        switch self {
        case .conflict(let id, let replacing, let current):
            let base = replacing.map { "revision \($0)" } ?? "no revision (a new document)"
            let now = current.map { "the current revision is \($0)" } ?? "it does not exist"
            return "conflict saving \(name(id)): the save was based on \(base) but \(now)"
        case .notFound(let id, let revision):
            return "not found: \(name(id))\(revision.map { " revision \($0)" } ?? "")"
        case .invalidDocument(_, let reason):
            return "invalid document: \(reason)"
        case .encodingFailed(let id, let detail):
            return "cannot encode \(name(id)) as JSON: \(detail)"
        case .decodingFailed(let id, let revision, let detail):
            return "cannot decode \(name(id)) revision \(revision): \(detail)"
        case .handlerFailed(let id, let detail):
            return "conflict handler for \(name(id)) failed: \(detail)"
        case .storageFailed(let detail):
            return "storage failed: \(detail)"
        case .invalidConfiguration(let detail):
            return "invalid configuration: \(detail)"
        case .attachmentFailed(let id, let detail):
            return "attachment\(id.map { " of \(name($0))" } ?? ""): \(detail)"
        }
    }

    /// The error a store failure means for the caller; `documentID` is the document the call was
    /// about, used when the store's error does not name one. A `DatabaseError` thrown from inside a
    /// conflict handler (its decoding or encoding) comes back as itself.
    init(_ error: StoreError, documentID: String?) {
        switch error {
        case .conflict(let id, let replacing, let current):
            self = .conflict(documentID: id, replacing: replacing, current: current)
        case .notFound(let id, let revision):
            self = .notFound(documentID: id, revision: revision)
        case .invalidInput(let input):
            self = .invalidDocument(documentID: input.documentID ?? documentID, reason: input.description)
        case .handlerFailed(_, let underlying as DatabaseError):
            self = underlying
        case .handlerFailed(let id, let underlying):
            self = .handlerFailed(documentID: id, detail: "\(underlying)")
        case .bodyUnavailable, .schemaTooNew, .corrupt, .damaged, .sqlite:
            self = .storageFailed(detail: error.description)
        case .attachment(let detail):
            self = .attachmentFailed(documentID: documentID, detail: detail)
        }
    }
}
