import CanopyCore

/// Which documents a replication carries (`Protocol/design.md` §4.3). A filtered replication has its own
/// checkpoint: the filter is part of the replication id.
public enum ReplicationFilter: Sendable {
    /// Every document.
    case all
    /// Only these document ids.
    case documentIDs([String])
    /// Only documents whose id starts with this prefix.
    case idPrefix(String)
    /// An application predicate over the document id and its current body (nil for a deletion).
    /// `name` identifies the predicate in the replication id; change it when the predicate changes.
    /// Deletions always pass a predicate: a tombstone for a document the other side never had is
    /// harmless, while a lost deletion would resurrect data.
    case predicate(name: String, @Sendable (String, JSONValue?) -> Bool)

    /// True if the document passes the filter. `body` is nil for deletions.
    public func accepts(documentID: String, body: @autoclosure () -> JSONValue?) -> Bool {
        switch self {
        case .all: return true
        case .documentIDs(let ids): return ids.contains(documentID)
        case .idPrefix(let prefix): return documentID.hasPrefix(prefix)
        case .predicate(_, let predicate):
            guard let value = body() else { return true }
            return predicate(documentID, value)
        }
    }

    /// True if deciding needs the document's body.
    public var needsBody: Bool {
        if case .predicate = self { return true }
        return false
    }

    /// A stable description for the replication id: the same filter always gives the same text.
    public var identity: String {
        switch self {
        case .all: return "all"
        case .documentIDs(let ids):
            return "ids:" + String(decoding: CanonicalJSON.encode(.array(ids.sorted().map(JSONValue.string))), as: UTF8.self)
        case .idPrefix(let prefix): return "prefix:" + String(decoding: CanonicalJSON.encode(.string(prefix)), as: UTF8.self)
        case .predicate(let name, _): return "predicate:" + String(decoding: CanonicalJSON.encode(.string(name)), as: UTF8.self)
        }
    }
}
