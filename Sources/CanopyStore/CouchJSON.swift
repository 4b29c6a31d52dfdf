import CanopyCore

/// CouchDB's JSON shape for documents (`Protocol/design.md` §3.6, CouchDB interop), pure conversion both ways.
///
/// A document revision in CouchDB shape is its body plus special members:
///
///     _id          the document id
///     _rev         "N-H", the revision
///     _revisions   {"start": N, "ids": [H, parent H, …]}, newest first (the revision's history)
///     _deleted     true for any deletion
///     _conflicts   other open live leaves (export of the current revision only; ignored on import)
///     _closed      true for a closing tombstone (a Canopy extension CouchDB ignores)
///     _resolved    true for a revision written by conflict resolution (a Canopy extension, kept
///                  so that the revision's kind — part of its content hash — survives a round trip)
///
/// Members `_deleted_conflicts`, `_local_seq` and `_revs_info` are informational and ignored on
/// import; `_attachments` is part of the body (an import stores inline content first,
/// `storingInlineAttachments`); any other member starting with `_` is refused with a typed error
/// rather than silently dropped.
public enum CouchJSON {
    /// Members that carry revision metadata, never part of a body.
    static let metadataMembers: Set<String> = ["_id", "_rev", "_revisions", "_deleted", "_conflicts", "_closed", "_resolved"]
    /// Informational members accepted and ignored on import.
    static let ignoredMembers: Set<String> = ["_deleted_conflicts", "_local_seq", "_revs_info"]

    /// One revision read from CouchDB JSON.
    public struct ImportedRevision: Sendable {
        public let documentID: String
        public let path: RevisionPath
        public let body: JSONValue
    }

    /// The CouchDB-shape object for one revision.
    public static func export(
        documentID: String, path: RevisionPath, body: JSONValue, conflicts: [RevisionID]? = nil
    ) -> JSONValue {
        var members = body.objectValue ?? [:]
        members["_id"] = .string(documentID)
        members["_rev"] = .string(path.leaf.description)
        members["_revisions"] = .object([
            "start": .int(Int64(path.leaf.generation)),
            "ids": .array(path.revisions.map { .string($0.digestHex) }),
        ])
        if path.kind.isDeleted { members["_deleted"] = .bool(true) }
        if path.kind.isClosed { members["_closed"] = .bool(true) }
        if path.kind == .resolvedLive || path.kind == .resolvedDeleted { members["_resolved"] = .bool(true) }
        if let conflicts, !conflicts.isEmpty { members["_conflicts"] = .array(conflicts.map { .string($0.description) }) }
        return .object(members)
    }

    /// Reads one CouchDB-shape revision. Throws `StoreInputError` naming the document.
    public static func importRevision(_ value: JSONValue) throws(StoreInputError) -> ImportedRevision {
        guard case .object(let members) = value else { throw .bodyNotObject(documentID: nil) }
        guard case .string(let id)? = members["_id"] else {
            throw .invalidCouchDocument(documentID: nil, detail: "_id missing or not a string")
        }
        try InputValidation.checkDocumentID(id)
        guard case .string(let revText)? = members["_rev"] else {
            throw .invalidCouchDocument(documentID: id, detail: "_rev missing or not a string")
        }
        let leaf = try StoreInput.revisionID(revText, of: id)
        let kind = try revisionKind(members, documentID: id)
        let ancestors = try history(members["_revisions"], leaf: leaf, documentID: id)
        var body: [String: JSONValue] = [:]
        for (key, member) in members where !metadataMembers.contains(key) && !ignoredMembers.contains(key) {
            guard !key.hasPrefix("_") || key == Attachments.member else {
                throw .invalidCouchDocument(documentID: id, detail: "unsupported special member \(key)")
            }
            body[key] = member
        }
        let path: RevisionPath
        do { path = try RevisionPath(leaf: leaf, kind: kind, ancestors: ancestors) } catch {
            throw .invalidHistory(documentID: id, detail: error.description)
        }
        return ImportedRevision(documentID: id, path: path, body: .object(body))
    }

    /// The kind a CouchDB-shape revision declares with `_deleted`, `_closed` and `_resolved`.
    private static func revisionKind(_ members: [String: JSONValue], documentID: String) throws(StoreInputError) -> RevisionKind {
        func flag(_ name: String) throws(StoreInputError) -> Bool {
            switch members[name] {
            case nil, .bool(false)?: return false
            case .bool(true)?: return true
            default: throw .invalidCouchDocument(documentID: documentID, detail: "\(name) is not a boolean")
            }
        }
        let deleted = try flag("_deleted")
        let closed = try flag("_closed")
        let resolved = try flag("_resolved")
        if closed {
            guard deleted, !resolved else {
                throw .invalidCouchDocument(documentID: documentID, detail: "_closed without _deleted, or with _resolved")
            }
            return .closed
        }
        if resolved { return deleted ? .resolvedDeleted : .resolvedLive }
        return deleted ? .deleted : .live
    }

    /// The ancestors named by `_revisions` (newest first, the leaf excluded), checked against the
    /// leaf: `start` must be its generation, `ids[0]` its digest, and the list no longer than the
    /// generation allows.
    private static func history(_ value: JSONValue?, leaf: RevisionID, documentID: String) throws(StoreInputError) -> [RevisionID] {
        guard let value else { return [] }
        guard case .object(let revisions) = value, case .int(let start)? = revisions["start"],
            case .array(let ids)? = revisions["ids"]
        else { throw .invalidCouchDocument(documentID: documentID, detail: "_revisions must be {start, ids}") }
        guard start == Int64(leaf.generation) else {
            throw .invalidHistory(documentID: documentID, detail: "_revisions.start \(start) but _rev is generation \(leaf.generation)")
        }
        guard !ids.isEmpty, ids.count <= leaf.generation, ids.count <= StoreLimits.revsLimitMax else {
            throw .invalidHistory(documentID: documentID, detail: "_revisions.ids has \(ids.count) entries for generation \(leaf.generation)")
        }
        var ancestors: [RevisionID] = []
        for (offset, id) in ids.enumerated() {
            guard case .string(let hex) = id else {
                throw .invalidHistory(documentID: documentID, detail: "_revisions.ids[\(offset)] is not a string")
            }
            let revision = try StoreInput.revisionID("\(leaf.generation - offset)-\(hex)", of: documentID)
            if offset == 0 {
                guard revision == leaf else {
                    throw .invalidHistory(documentID: documentID, detail: "_revisions.ids[0] is not the digest of _rev")
                }
            } else {
                ancestors.append(revision)
            }
        }
        return ancestors
    }
}
