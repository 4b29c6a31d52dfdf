/// A revision that settling a conflict adds to a tree.
public struct PlannedRevision: Sendable, Equatable {
    /// The new revision's id (content-addressed: nodes that plan the same thing get the same id).
    public let id: RevisionID
    /// The leaf it is written under.
    public let parent: RevisionID
    /// `.closed` for a closing tombstone, `.resolvedLive` / `.resolvedDeleted` for the outcome.
    public let kind: RevisionKind
    /// Its body (`{}` for tombstones).
    public let body: JSONValue
    /// `body` as canonical JSON, the bytes its id hashes (encoded once, for the id and the write).
    public let canonicalBody: [UInt8]
}

/// Turns resolution decisions into revisions. Pure: the store applies the plan in its transaction.
///
/// Shape of every plan: the outcome (when it is not simply "keep the automatic winner") is written
/// as a child of the leaf the automatic rule picks, `W`; every other open leaf gets a closing
/// tombstone as its child. Because all of these are content-addressed, two nodes that decide the
/// same thing write identical revisions and converge with no new conflict; two nodes that decide
/// differently write different children of the same `W`, which the automatic rule then settles
/// (`needsResolver` returns false for a conflict among resolution outputs).
public enum ConflictResolution {
    /// The automatic rule (Couchbase Lite's): if any conflicting open leaf is a deletion, the
    /// deletion wins (the highest such by generation, then digest); otherwise the highest leaf.
    /// Nil when the tree is not conflicted.
    ///
    /// Except for a deletion that may be a live leaf's own ancestor: when the tree holds a live
    /// leaf's history only down to some generation (its oldest revision's parent was stemmed
    /// away by the revs limit), a deletion of a lower generation cannot be told from a revision
    /// of that missing history that came back as a leaf (as in CouchDB, a revision stemmed away
    /// and received again is a new branch). Such a deletion does not win for being a deletion:
    /// the highest leaf does, so an old deletion never deletes the document a node kept editing.
    /// A node holding the whole history sees no conflict at all there; the closing tombstone the
    /// others write under the deletion reaches it as a closed branch, so they converge.
    public static func automaticWinner(of tree: RevTree) -> RevTree.Node? {
        automaticWinner(among: tree.conflictingLeaves, in: tree)
    }

    /// The automatic rule over `tree`'s `conflictingLeaves` (nil when there are none).
    public static func automaticWinner(among conflicting: [RevTree.Node], in tree: RevTree) -> RevTree.Node? {
        guard !conflicting.isEmpty else { return nil }
        var deletions = conflicting.filter { $0.kind.isDeleted }
        if !deletions.isEmpty, deletions.count < conflicting.count,
            let cut = conflicting.lazy.filter({ !$0.kind.isDeleted }).compactMap({ tree.stemmedGeneration(of: $0.id) }).max()
        {
            deletions.removeAll { $0.id.generation < cut }
        }
        let candidates = deletions.isEmpty ? conflicting : deletions
        return candidates.max { $0.id < $1.id }
    }

    /// The automatic rule as a decision, or nil when the tree is not conflicted.
    public static func automaticDecision(for tree: RevTree) -> ResolutionDecision? {
        automaticWinner(of: tree).map { .keep($0.id) }
    }

    /// False when every conflicting leaf was itself written by a resolution: resolvers on two nodes
    /// disagreed, asking again could disagree forever, so the automatic rule settles it.
    public static func needsResolver(_ tree: RevTree) -> Bool {
        needsResolver(among: tree.conflictingLeaves)
    }

    /// `needsResolver` over a tree's `conflictingLeaves`.
    public static func needsResolver(among conflicting: [RevTree.Node]) -> Bool {
        !conflicting.allSatisfy { $0.kind.isResolution }
    }

    /// Errors in a decision.
    public enum PlanError: Error, Equatable, Sendable, CustomStringConvertible {
        /// The decision keeps a revision that is not one of the conflicting leaves.
        case notAConflictingLeaf(RevisionID)
        /// The decision keeps a leaf whose body the store does not hold.
        case bodyUnavailable(RevisionID)
        /// The tree has no conflict to settle.
        case notConflicted

        public var description: String {
            switch self {
            case .notAConflictingLeaf(let id): return "revision \(id) is not a conflicting leaf of the document"
            case .bodyUnavailable(let id): return "the body of revision \(id) is not available"
            case .notConflicted: return "the document is not conflicted"
            }
        }
    }

    /// The revisions that carry out `decision` on `tree`. `bodies` holds the conflicting leaves'
    /// bodies (needed only to keep a leaf other than the automatic winner).
    public static func plan(_ decision: ResolutionDecision, tree: RevTree, bodies: [RevisionID: JSONValue]) throws(PlanError) -> [PlannedRevision] {
        try plan(decision, conflicting: tree.conflictingLeaves, in: tree, bodies: bodies)
    }

    /// `plan` over `tree`'s `conflictingLeaves`, for a caller that has them already.
    public static func plan(
        _ decision: ResolutionDecision, conflicting: [RevTree.Node], in tree: RevTree, bodies: [RevisionID: JSONValue]
    ) throws(PlanError) -> [PlannedRevision] {
        guard let winner = automaticWinner(among: conflicting, in: tree) else { throw .notConflicted }
        var outcome: (kind: RevisionKind, body: JSONValue)?
        switch decision {
        case .keep(let id):
            guard let kept = conflicting.first(where: { $0.id == id }) else { throw .notAConflictingLeaf(id) }
            if kept.id != winner.id {
                if kept.kind.isDeleted {
                    if !winner.kind.isDeleted { outcome = (.resolvedDeleted, .emptyObject) }
                } else {
                    guard let body = bodies[id] else { throw .bodyUnavailable(id) }
                    outcome = (.resolvedLive, body)
                }
            }
        case .merged(let body):
            if winner.kind.isDeleted || bodies[winner.id] != body { outcome = (.resolvedLive, body) }
        case .delete:
            if !winner.kind.isDeleted { outcome = (.resolvedDeleted, .emptyObject) }
        }
        var planned: [PlannedRevision] = []
        for leaf in conflicting where leaf.id != winner.id {
            planned.append(closing(leaf.id))
        }
        if let outcome {
            let bytes = CanonicalJSON.encode(outcome.body)
            let id = RevisionHasher.revisionID(parent: winner.id, kind: outcome.kind, canonicalBody: bytes)
            planned.append(PlannedRevision(id: id, parent: winner.id, kind: outcome.kind, body: outcome.body, canonicalBody: bytes))
        }
        return planned
    }

    /// The closing tombstone that ends the branch at `leaf`.
    public static func closing(_ leaf: RevisionID) -> PlannedRevision {
        let id = RevisionHasher.revisionID(parent: leaf, kind: .closed, canonicalBody: closingBody)
        return PlannedRevision(id: id, parent: leaf, kind: .closed, body: .emptyObject, canonicalBody: closingBody)
    }

    /// The canonical body of every closing tombstone: `{}`.
    public static let closingBody: [UInt8] = CanonicalJSON.encode(.emptyObject)
}

extension RevTree {
    /// Adds the revisions of a resolution plan (each a child of a current leaf).
    public mutating func apply(_ plan: [PlannedRevision]) throws(RevTreeError) {
        for revision in plan {
            try insertEdit(id: revision.id, parent: revision.parent, kind: revision.kind)
        }
    }
}
