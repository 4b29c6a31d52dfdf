/// A revision and its ancestry, newest first: CouchDB's `_revisions` shape. `ancestors[0]` is the
/// leaf's parent, `ancestors[1]` its grandparent, and so on; generations are consecutive, so a path
/// can be sent as one generation and a list of digests.
///
/// A path may stop anywhere (the sender stops at a revision the receiver has, or at `revsLimit`).
/// Where it was cut above a revision the sender knows, `rootParent` names the oldest revision's
/// parent: a link, not a revision of the path. Without it a receiver would take the oldest revision
/// for a root, and if the parent reached it later by another way, the parent would look like an
/// open leaf there and nowhere else — the nodes would disagree on the document's leaves for good.
public struct RevisionPath: Hashable, Sendable {
    /// The newest revision of the path.
    public let leaf: RevisionID
    /// What the leaf is (user edit, deletion, closing tombstone, resolution output).
    public let kind: RevisionKind
    /// The leaf's ancestors, newest first, each one generation older than the one before.
    public let ancestors: [RevisionID]
    /// The parent of the path's oldest revision when the path was cut above it (nil when the
    /// oldest revision is a root or its parent is unknown to the sender). It is one generation
    /// older than the oldest revision.
    public let rootParent: RevisionID?

    /// Creates a path, checking that generations step down by exactly one and stay ≥ 1, the root
    /// parent included.
    public init(
        leaf: RevisionID, kind: RevisionKind, ancestors: [RevisionID] = [], rootParent: RevisionID? = nil
    ) throws(RevTreeError) {
        var expected = leaf.generation - 1
        for ancestor in ancestors {
            try Self.check(ancestor, expected: expected, leaf: leaf)
            expected -= 1
        }
        if let rootParent { try Self.check(rootParent, expected: expected, leaf: leaf) }
        self.leaf = leaf
        self.kind = kind
        self.ancestors = ancestors
        self.rootParent = rootParent
    }

    private static func check(_ ancestor: RevisionID, expected: Int, leaf: RevisionID) throws(RevTreeError) {
        guard ancestor.generation == expected, expected >= 1 else {
            throw .invalidHistory(revision: leaf, detail: "ancestor \(ancestor) where generation \(expected) was expected")
        }
    }

    /// The leaf's parent, if the path names it: its first ancestor, else the root parent. The
    /// revision's content hash covers it.
    public var parent: RevisionID? { ancestors.first ?? rootParent }

    /// The path's revisions, newest first, the leaf included.
    public var revisions: [RevisionID] { [leaf] + ancestors }
}

/// Errors from building or changing a revision tree. They describe bad input (a lying or broken
/// peer, a stale local write), never a programmer error.
public enum RevTreeError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A history with a gap or a wrong generation.
    case invalidHistory(revision: RevisionID, detail: String)
    /// A path claims a parent for a revision whose parent is already known to be another one.
    /// Revision ids are content addresses, so honest nodes never disagree about a parent.
    case conflictingAncestry(revision: RevisionID, knownParent: RevisionID, claimedParent: RevisionID)
    /// A path claims a kind for a revision that is already known to have another kind.
    case conflictingKind(revision: RevisionID, known: RevisionKind, claimed: RevisionKind)
    /// A local edit names a parent that is not a leaf of the tree (a stale revision).
    case parentNotLeaf(RevisionID)
    /// A local edit names a parent that the tree does not have.
    case unknownParent(RevisionID)
    /// A local edit would add a revision the tree already has.
    case revisionExists(RevisionID)
    /// A local edit's id does not have the generation its parent implies.
    case wrongGeneration(revision: RevisionID, parent: RevisionID?)

    public var description: String {
        switch self {
        case .invalidHistory(let revision, let detail): return "invalid history for \(revision): \(detail)"
        case .conflictingAncestry(let revision, let known, let claimed):
            return "revision \(revision) has parent \(known), but the history claims \(claimed)"
        case .conflictingKind(let revision, let known, let claimed):
            return "revision \(revision) is \(known), but the history claims \(claimed)"
        case .parentNotLeaf(let parent): return "revision \(parent) is not a leaf (stale revision)"
        case .unknownParent(let parent): return "revision \(parent) is not in the document's history"
        case .revisionExists(let revision): return "revision \(revision) already exists"
        case .wrongGeneration(let revision, let parent):
            return "revision \(revision) cannot be a child of \(parent.map { "\($0)" } ?? "nothing")"
        }
    }
}
