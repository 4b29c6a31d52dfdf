/// The resolvers Canopy ships (`Protocol/design.md` §3.3).
public enum BuiltInResolver {
    /// Keeps the node's own current revision (the remote one if the node had none).
    public static let localWins: any ConflictResolver = ClosureResolver { conflict in
        localWins(leaves: conflict.leaves.map(\.revision), local: conflict.localRevision)
    }

    /// Keeps the best leaf (canonical order) that is not the node's own current revision.
    public static let remoteWins: any ConflictResolver = ClosureResolver { conflict in
        remoteWins(leaves: conflict.leaves.map(\.revision), local: conflict.localRevision)
    }

    /// `localWins` on the leaves' ids alone (canonical order; it reads no body).
    public static func localWins(leaves: [RevisionID], local: RevisionID?) -> ResolutionDecision {
        if let local, leaves.contains(local) { return .keep(local) }
        return .keep(leaves[0])
    }

    /// `remoteWins` on the leaves' ids alone (canonical order; it reads no body).
    public static func remoteWins(leaves: [RevisionID], local: RevisionID?) -> ResolutionDecision {
        .keep(leaves.first { $0 != local } ?? leaves[0])
    }

    /// Three-way merge of JSON objects, field by field against the common ancestor's body: a field
    /// changed on one side only takes that side's value; a field changed on both sides takes the
    /// value of the leaf the automatic rule prefers; nested objects merge recursively. A deletion
    /// among the leaves wins (the automatic rule). Deterministic: every node computes the same body.
    public static let mergeJSON: any ConflictResolver = ClosureResolver { conflict in
        let deleted = conflict.leaves.filter(\.isDeleted)
        if !deleted.isEmpty { return .delete }
        let ranked = conflict.leaves.sorted { $0.revision > $1.revision }
        guard let first = ranked.first?.body else {
            throw MergeJSONError.bodyUnavailable(conflict.leaves[0].revision)
        }
        var merged = first
        for leaf in ranked.dropFirst() {
            guard let body = leaf.body else { throw MergeJSONError.bodyUnavailable(leaf.revision) }
            merged = JSONMerge.threeWay(ancestor: conflict.commonAncestorBody, preferred: merged, other: body)
        }
        return .merged(merged)
    }
}

/// Why `mergeJSON` could not merge.
public enum MergeJSONError: Error, Equatable, Sendable {
    /// A leaf's body is not available (it was compacted away).
    case bodyUnavailable(RevisionID)
}

/// Field-by-field three-way merge of JSON values.
public enum JSONMerge {
    /// Merges `other` into `preferred` against `ancestor`. When both objects, fields merge one by one
    /// (recursively); otherwise `other` wins only if `preferred` did not change from the ancestor.
    public static func threeWay(ancestor: JSONValue?, preferred: JSONValue, other: JSONValue) -> JSONValue {
        if preferred == other { return preferred }
        guard case .object(let mine) = preferred, case .object(let theirs) = other else {
            return preferred == ancestor ? other : preferred
        }
        let base = ancestor?.objectValue
        if ancestor != nil && base == nil { return preferred == ancestor ? other : preferred }
        var result: [String: JSONValue] = [:]
        let keys = Set(mine.keys).union(theirs.keys).union(base?.keys ?? [:].keys)
        for key in keys {
            let a = base?[key]
            let p = mine[key]
            let o = theirs[key]
            let value: JSONValue?
            if p == o {
                value = p
            } else if o == a {
                value = p
            } else if p == a {
                value = o
            } else if let p, let o {
                value = threeWay(ancestor: a, preferred: p, other: o)
            } else {
                value = p
            }
            if let value { result[key] = value }
        }
        return .object(result)
    }
}
