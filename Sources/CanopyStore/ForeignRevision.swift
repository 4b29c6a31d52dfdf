import CanopyCore

/// A revision received from elsewhere (a peer, or an import), with its ancestry: what
/// `DocumentStore.bulkInsertForeign` takes. No new edit is made; the path is merged as is.
public struct ForeignRevision: Sendable {
    /// The body of a foreign revision.
    public enum Body: Sendable {
        /// Canonical JSON bytes as received from the wire: checked for canonical form and hashed
        /// as they are, never parsed on the hot path.
        case canonical([UInt8])
        /// A parsed body (imports); it is encoded canonically once.
        case value(JSONValue)
    }

    /// The document.
    public let documentID: String
    /// The revision (`path.leaf`), its kind, and its ancestors, newest first.
    public let path: RevisionPath
    /// The leaf's body.
    public let body: Body
    /// True when the leaf's id is an imported one: given by another system (CouchDB's are MD5
    /// over Erlang terms), not the hash of the revision's parent, kind and body. Such an id is
    /// accepted without the hash check and stays marked, so every peer it travels to knows it
    /// cannot be verified (`Protocol/replication-v1.md` §6.6, "Imported revision ids").
    public let importedID: Bool

    /// A foreign revision.
    public init(documentID: String, path: RevisionPath, body: Body, importedID: Bool = false) {
        self.documentID = documentID
        self.path = path
        self.body = body
        self.importedID = importedID
    }
}

/// How `bulkInsertForeign` checks revision ids.
public enum RevisionIDCheck: Sendable {
    /// Every leaf id must be the content hash of its parent, kind and body (`RevisionHasher`),
    /// unless the revision is marked `importedID`: a peer that lies about a revision id is
    /// rejected. Use for all replication input.
    case contentHash
    /// Ids are taken as given: a leaf whose id is not its content hash (or that names no parent
    /// past generation 1) is stored marked as imported. For importing data from systems whose
    /// revision ids are not Canopy's content hashes (CouchDB's are MD5 over Erlang terms).
    case trusted
}

/// What happened to one document in a `bulkInsertForeign` batch (or a retry pass), so that
/// replication can emit document events.
public struct ForeignDocumentResult: Sendable, Equatable {
    /// How the document's conflict, if any, stands after the batch.
    public enum Resolution: Sendable, Equatable {
        /// The document is not conflicted.
        case notConflicted
        /// The policy settled a conflict; `current` is the winner.
        case resolved
        /// The conflict is kept (manual policy).
        case kept
        /// A custom resolver failed; the conflict is kept and will be retried. Holds the error.
        case failed(String)
        /// The document's rule names a resolver the store does not hold (the agent's resolvers
        /// are processes): the conflict is kept until that resolver answers.
        case awaiting(resolver: String)
    }

    /// The document.
    public let documentID: String
    /// Revisions new to this store, oldest first: received ones, then any the resolution wrote.
    public var added: [RevisionID] {
        switch addedRevisions {
        case .list(let ids): return ids
        case .newChain(let path): return path.ancestors.reversed() + [path.leaf]
        }
    }
    /// The conflict outcome.
    public let resolution: Resolution
    /// The conflict the batch left, before the policy acted on it; nil when the batch added
    /// nothing or the document is not conflicted.
    public let conflict: DetectedConflict?
    /// The current revision after the batch.
    public let current: RevisionID
    /// Whether the current revision is a deletion.
    public let currentIsDeleted: Bool
    /// The document was conflicted before the batch and the revisions it received, not this
    /// node's policy, left it with no conflict: typically another node's resolution (its closing
    /// tombstones) arriving before this node settled the conflict it kept.
    public let settledByRevisions: Bool

    /// How `added` is held: a new document that received one path keeps the path, and the list
    /// is built only when asked for — replication asks only for the newest (`lastAdded`), and an
    /// array per document of an initial sync was one allocation per document for nothing.
    private enum AddedRevisions: Sendable {
        case list([RevisionID])
        /// Every revision of the path, oldest first.
        case newChain(RevisionPath)
    }

    private let addedRevisions: AddedRevisions

    init(
        documentID: String, added: [RevisionID], resolution: Resolution, conflict: DetectedConflict? = nil,
        current: RevisionID, currentIsDeleted: Bool, settledByRevisions: Bool = false
    ) {
        self.documentID = documentID
        self.addedRevisions = .list(added)
        self.resolution = resolution
        self.conflict = conflict
        self.current = current
        self.currentIsDeleted = currentIsDeleted
        self.settledByRevisions = settledByRevisions
    }

    /// The result for a new document that received `path`: every revision of it added, not
    /// conflicted, its leaf current.
    init(documentID: String, newChain path: RevisionPath) {
        self.documentID = documentID
        self.addedRevisions = .newChain(path)
        self.resolution = .notConflicted
        self.conflict = nil
        self.current = path.leaf
        self.currentIsDeleted = path.kind.isDeleted
        self.settledByRevisions = false
    }

    /// The newest revision added (the last of `added`), without building the list.
    public var lastAdded: RevisionID? {
        switch addedRevisions {
        case .list(let ids): return ids.last
        case .newChain(let path): return path.leaf
        }
    }

    /// True when the batch taught the store nothing about this document.
    public var alreadyKnown: Bool {
        switch addedRevisions {
        case .list(let ids): return ids.isEmpty
        case .newChain: return false
        }
    }

    /// Equal when they report the same: however `added` is held.
    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.documentID == rhs.documentID && lhs.added == rhs.added && lhs.resolution == rhs.resolution && lhs.conflict == rhs.conflict
            && lhs.current == rhs.current && lhs.currentIsDeleted == rhs.currentIsDeleted
            && lhs.settledByRevisions == rhs.settledByRevisions
    }
}

/// A conflict as a write found it, before the policy acted: for `conflict.detected` events and
/// for offering it to a resolver. A class, so that a result or event without a conflict (nearly
/// all of them) carries one pointer.
public final class DetectedConflict: Sendable, Equatable, CustomStringConvertible {
    /// The conflicting open leaves, canonical order (the automatic winner first).
    public let leaves: [RevisionID]
    /// The rule that covered the document (nil: the catch-all or a policy without rules).
    public let rule: String?
    /// The strategy that applied.
    public let strategy: ResolutionStrategy
    /// The document's current revision before the write (nil for a document new to the store).
    public let previous: RevisionID?

    /// A detected conflict.
    public init(leaves: [RevisionID], rule: String?, strategy: ResolutionStrategy, previous: RevisionID?) {
        self.leaves = leaves
        self.rule = rule
        self.strategy = strategy
        self.previous = previous
    }

    /// Who settles it, as events name it (`by`): the rule's name, else the strategy (`automatic`,
    /// `local-wins`, …; a resolver's name).
    public var settledBy: String { rule ?? strategy.resolverName ?? strategy.description }

    public var description: String { "\(leaves.count) leaves, \(rule.map { "rule \($0)" } ?? "catch-all") \(strategy)" }

    public static func == (lhs: DetectedConflict, rhs: DetectedConflict) -> Bool {
        lhs.leaves == rhs.leaves && lhs.rule == rhs.rule && lhs.strategy == rhs.strategy && lhs.previous == rhs.previous
    }
}
