extension RevTree {
    /// What a merge changed.
    public struct MergeOutcome: Sendable, Equatable {
        /// Revisions the tree did not hold before, oldest first.
        public var added: [RevisionID] = []
        /// True if the path's leaf was already in the tree (with or without new ancestry facts).
        public var leafWasKnown: Bool = false

        /// True when the merge taught the tree nothing new about revisions (it may still have
        /// learned a parent link or a kind).
        public var isNoOp: Bool { added.isEmpty }
    }

    /// Merges a foreign revision path (a leaf and its ancestry, newest first) into the tree.
    ///
    /// The merge is a union of facts — each revision, each parent link, each kind — so merging the
    /// same set of paths in any order, any number of times, gives the same tree. A path whose oldest
    /// revision is unknown starts a new root (its parent is recorded if the path names it); a later
    /// path that names the missing link connects the two. A path that contradicts a known fact (a
    /// different parent or kind for a known revision) is rejected whole and changes nothing.
    @discardableResult
    public mutating func merge(_ path: RevisionPath) throws(RevTreeError) -> MergeOutcome {
        let revisions = path.revisions
        try validate(path)
        var outcome = MergeOutcome()
        outcome.leafWasKnown = contains(path.leaf)
        // Oldest first, so that parents are added before their children.
        for index in stride(from: revisions.count - 1, through: 0, by: -1) {
            let id = revisions[index]
            let parent = index + 1 < revisions.count ? revisions[index + 1] : path.rootParent
            let kind: RevisionKind = index == 0 ? path.kind : .live
            if let existing = node(id) {
                if existing.parent == nil, let parent { setParent(parent, of: id) }
                if existing.kind == .live, kind != .live { setKind(kind, of: id) }
            } else {
                add(Node(id: id, parent: parent, kind: kind))
                outcome.added.append(id)
            }
        }
        return outcome
    }

    /// Checks a path against the tree's known facts before anything is changed.
    private func validate(_ path: RevisionPath) throws(RevTreeError) {
        let revisions = path.revisions
        for (index, id) in revisions.enumerated() {
            guard let existing = node(id) else { continue }
            let claimed = index + 1 < revisions.count ? revisions[index + 1] : path.rootParent
            if let claimed, let known = existing.parent, known != claimed {
                throw .conflictingAncestry(revision: id, knownParent: known, claimedParent: claimed)
            }
            if index == 0, existing.kind != .live, path.kind != .live, existing.kind != path.kind {
                throw .conflictingKind(revision: id, known: existing.kind, claimed: path.kind)
            }
        }
    }
}
