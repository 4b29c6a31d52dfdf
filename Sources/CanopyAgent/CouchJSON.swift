import CanopyCore
import CanopyStore

/// Documents in CouchDB's JSON shape, for `get`, `export` and `import` (Protocol/admin-v1.md §7).
///
/// A revision is written as its body's members plus `_id`, `_rev`, and where they apply
/// `_deleted: true`, `_revisions: {"start": N, "ids": [hex, …]}` (newest first), `_conflicts`,
/// `_deleted_conflicts`. Two extension members, which CouchDB ignores, keep what its shape cannot
/// say and what Canopy's content-addressed ids depend on: `_closed: true` marks a closing
/// tombstone written by conflict resolution, `_resolution: true` a body or deletion a resolution
/// wrote (DESIGN.md §3). Body members whose names start with `_` are refused on import, as
/// CouchDB refuses them.
enum CouchJSON {
    /// One revision as CouchDB shows it.
    static func document(_ document: Document) -> JSONValue {
        var members = document.body.objectValue ?? [:]
        members["_id"] = .string(document.id)
        members["_rev"] = .string(document.revision.description)
        if document.isDeleted { members["_deleted"] = .bool(true) }
        switch document.kind {
        case .closed: members["_closed"] = .bool(true)
        case .resolvedLive, .resolvedDeleted: members["_resolution"] = .bool(true)
        case .live, .deleted: break
        }
        if let history = document.history, let first = history.first {
            members["_revisions"] = .object([
                "start": .int(Int64(first.generation)), "ids": .array(history.map { .string($0.digestHex) }),
            ])
        }
        if let conflicts = document.conflicts, !conflicts.isEmpty {
            members["_conflicts"] = .array(conflicts.map { .string($0.description) })
        }
        if let deleted = document.deletedConflicts, !deleted.isEmpty {
            members["_deleted_conflicts"] = .array(deleted.map { .string($0.description) })
        }
        return .object(members)
    }

    /// A revision read from an import, before the kinds of CouchDB's settled branches are fixed.
    struct ImportedRevision {
        var documentID: String
        var path: RevisionPath
        var body: JSONValue
    }

    /// Parses one `_bulk_docs` entry (with `new_edits: false` semantics: `_rev` and optionally
    /// `_revisions` give the revision and its ancestry as they are).
    static func revision(from value: JSONValue, index: Int) throws(AdminFailure) -> ImportedRevision {
        func bad(_ detail: String) -> AdminFailure { AdminFailure(.invalidArgument, "docs[\(index)]: \(detail)") }
        guard case .object(var members) = value else { throw bad("not a JSON object") }
        guard case .string(let id)? = members.removeValue(forKey: "_id") else { throw bad("needs a string \"_id\"") }
        guard case .string(let revText)? = members.removeValue(forKey: "_rev"), let leaf = RevisionID(revText) else {
            throw bad("needs \"_rev\" of the form N-<32 hex>")
        }
        let deleted = try flag(members.removeValue(forKey: "_deleted"), "_deleted", bad)
        let closed = try flag(members.removeValue(forKey: "_closed"), "_closed", bad)
        let resolution = try flag(members.removeValue(forKey: "_resolution"), "_resolution", bad)
        let ancestors = try history(members.removeValue(forKey: "_revisions"), leaf: leaf, bad)
        for key in ["_conflicts", "_deleted_conflicts", "_attachments", "_local_seq", "_revs_info"] { members[key] = nil }
        if let stray = members.keys.sorted().first(where: { $0.hasPrefix("_") }) {
            throw bad("unsupported special member \"\(stray.prefix(40))\"")
        }
        let kind: RevisionKind
        switch (closed, resolution, deleted) {
        case (true, _, _): kind = .closed
        case (false, true, true): kind = .resolvedDeleted
        case (false, true, false): kind = .resolvedLive
        case (false, false, true): kind = .deleted
        case (false, false, false): kind = .live
        }
        do {
            let path = try RevisionPath(leaf: leaf, kind: kind, ancestors: ancestors)
            return ImportedRevision(documentID: id, path: path, body: .object(members))
        } catch {
            throw bad(error.description)
        }
    }

    private static func flag(_ value: JSONValue?, _ name: String, _ bad: (String) -> AdminFailure) throws(AdminFailure) -> Bool {
        switch value {
        case nil, .null?: return false
        case .bool(let flag)?: return flag
        default: throw bad("\"\(name)\" must be true or false")
        }
    }

    /// The ancestors named by `_revisions` (whose first id must be the leaf's own digest).
    private static func history(_ value: JSONValue?, leaf: RevisionID, _ bad: (String) -> AdminFailure) throws(AdminFailure) -> [RevisionID] {
        guard let value, value != .null else { return [] }
        guard case .object(let members) = value, case .int(let start)? = members["start"],
            case .array(let ids)? = members["ids"], Int(start) == leaf.generation, ids.count <= Int(start)
        else { throw bad("\"_revisions\" must be {\"start\": generation of _rev, \"ids\": [hex, …]}") }
        var revisions: [RevisionID] = []
        for (offset, item) in ids.enumerated() {
            guard case .string(let hex) = item, let revision = RevisionID("\(Int(start) - offset)-\(hex)") else {
                throw bad("\"_revisions.ids\" must hold 32-character hex digests")
            }
            revisions.append(revision)
        }
        guard revisions.first == leaf else { throw bad("\"_revisions.ids\" must start with the digest of \"_rev\"") }
        return Array(revisions.dropFirst())
    }

    /// CouchDB mode (`import --couchdb`): in CouchDB data a deleted leaf beside a live winner is a
    /// settled branch, not a concurrent user deletion, so every deleted leaf that is not CouchDB's
    /// winner (live before deleted, then higher generation, then higher hash) becomes a closing
    /// tombstone. Then each document reads exactly as CouchDB showed it (DESIGN.md §3).
    static func settleCouchDBBranches(_ revisions: inout [ImportedRevision]) {
        var winners: [String: RevisionPath] = [:]
        for revision in revisions {
            guard let best = winners[revision.documentID] else { winners[revision.documentID] = revision.path; continue }
            if couchOrder(revision.path, before: best) { winners[revision.documentID] = revision.path }
        }
        for index in revisions.indices {
            let path = revisions[index].path
            guard path.kind == .deleted, winners[revisions[index].documentID]?.leaf != path.leaf else { continue }
            revisions[index].path = try! RevisionPath(leaf: path.leaf, kind: .closed, ancestors: path.ancestors)
        }
    }

    private static func couchOrder(_ a: RevisionPath, before b: RevisionPath) -> Bool {
        if a.kind.isDeleted != b.kind.isDeleted { return !a.kind.isDeleted }
        if a.leaf.generation != b.leaf.generation { return a.leaf.generation > b.leaf.generation }
        return a.leaf.digestHex > b.leaf.digestHex
    }
}
