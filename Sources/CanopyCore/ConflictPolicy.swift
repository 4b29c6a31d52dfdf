/// How a node settles the conflicts that revisions from a peer create (`Protocol/design.md` §3).
public enum ConflictPolicy: Sendable {
    /// Deletes win, then the most revisions (highest generation), then the higher digest.
    /// Losing leaves are closed.
    case automatic
    /// Conflicts are kept, CouchDB-style, until the application calls `resolveConflicts`.
    case manual
    /// An application resolver decides. If it throws, the conflict is kept and retried later.
    case custom(any ConflictResolver)
    /// Per-document rules (by id prefix and body field), first match wins, and a catch-all.
    case rules(ResolutionRules)

    /// True when the policy can settle a kept conflict without anyone's help: a store opened with
    /// it retries the conflicts a failed resolver left.
    public var settlesKeptConflicts: Bool {
        switch self {
        case .manual: false
        case .automatic, .custom: true
        case .rules(let rules): rules.fallback != .manual || rules.rules.contains { $0.strategy != .manual }
        }
    }
}

/// A conflicted document as a resolver sees it.
public struct Conflict: Sendable, Equatable {
    /// The document.
    public let documentID: String
    /// The conflicting open leaves in canonical order (the current revision first), with bodies.
    public let leaves: [ConflictLeaf]
    /// The body of the newest common ancestor of all leaves, when the store still holds it.
    public let commonAncestorBody: JSONValue?
    /// The node's current revision before the revisions that caused the conflict arrived, if the
    /// node had the document. `localWins` keeps it; `remoteWins` keeps another leaf. Nil too when
    /// a kept conflict is retried (a resolver threw before, a policy changed): the store does not
    /// record which leaf was this node's.
    public let localRevision: RevisionID?

    /// Creates a conflict description.
    public init(documentID: String, leaves: [ConflictLeaf], commonAncestorBody: JSONValue?, localRevision: RevisionID?) {
        self.documentID = documentID
        self.leaves = leaves
        self.commonAncestorBody = commonAncestorBody
        self.localRevision = localRevision
    }
}

/// One conflicting leaf.
public struct ConflictLeaf: Sendable, Equatable {
    /// The leaf revision.
    public let revision: RevisionID
    /// Its kind (`.deleted` / `.resolvedDeleted` for deletions).
    public let kind: RevisionKind
    /// Its body; nil when the store does not hold it.
    public let body: JSONValue?

    /// Creates a conflict leaf.
    public init(revision: RevisionID, kind: RevisionKind, body: JSONValue?) {
        self.revision = revision
        self.kind = kind
        self.body = body
    }

    /// True if the leaf is a deletion.
    public var isDeleted: Bool { kind.isDeleted }
}

/// What a resolver decided.
public enum ResolutionDecision: Sendable, Equatable {
    /// Keep this leaf's content as the document.
    case keep(RevisionID)
    /// Write this body as the document.
    case merged(JSONValue)
    /// Delete the document.
    case delete
}

/// An application's conflict resolver. It must be a pure function of the conflict for nodes to
/// agree without an extra round; a resolver that is not costs one more round, never an endless
/// exchange (see `RevisionKind.resolvedLive`).
public protocol ConflictResolver: Sendable {
    /// Decides how to settle `conflict`. Throwing keeps the conflict; it is reported as an event and
    /// retried on the next pass.
    func resolve(_ conflict: Conflict) throws -> ResolutionDecision
}

/// A resolver made from a closure.
public struct ClosureResolver: ConflictResolver {
    private let body: @Sendable (Conflict) throws -> ResolutionDecision

    /// Wraps `body` as a resolver.
    public init(_ body: @escaping @Sendable (Conflict) throws -> ResolutionDecision) {
        self.body = body
    }

    public func resolve(_ conflict: Conflict) throws -> ResolutionDecision {
        try body(conflict)
    }
}
