import CanopyCore

/// One conflict the agent offers a resolver client: the `{"resolve":{…}}` line of
/// `Protocol/admin-v1.md` §5, *Resolvers*, as the agent's resolver driver makes it and as
/// `ResolverClient` hands it to the application (CanopyAdmin encodes and reads the line).
///
/// The line's shape:
///
///     {"resolve":{"ticket":T,"resolver":NAME,"db":DB,"doc":ID,"rev":CURRENT,
///                 "leaves":[{"rev":R,"deleted":false,"body":{…}},…],
///                 "ancestor":{…}|null,"local_rev":R|null,"node_id":PEER|null,"rule":RULE|null}}
///
/// `doc`, `leaves`, `ancestor` and `local_rev` become ``conflict`` (the same ``Conflict`` a library
/// ``ConflictResolver`` sees); the other members are kept beside it.
public struct ResolverOffer: Sendable, Equatable {
    /// The agent's ticket for this offer; the answer names it. A ticket is never reused.
    public let ticket: Int64
    /// The resolver name the offer was sent to (the registration's `name`).
    public let resolver: String
    /// The database the document is in (`db`; `default` when the line names none).
    public let database: String
    /// The conflicted document: its open leaves (current first) with bodies, the common
    /// ancestor's body (`ancestor`, for a three-way merge) and the revision that was current on
    /// this node before the write that made the conflict (`local_rev`).
    ///
    /// A deleted leaf has kind ``RevisionKind/deleted`` and the body the agent sent (`{}`); a leaf
    /// whose body the agent no longer stores has a nil body. ``Conflict/commonAncestorBody`` and
    /// ``Conflict/localRevision`` are nil when the agent sent null.
    public let conflict: Conflict
    /// The node id of the peer whose revisions made the conflict (`node_id`); nil for an import or
    /// a conflict found by the agent's scan.
    public let peer: String?
    /// The config rule that routed the conflict to this resolver (`rule`); nil when the
    /// registration's prefix claimed it.
    public let rule: String?

    /// Creates an offer (an application's tests use it to call their resolve closure directly).
    public init(
        ticket: Int64, resolver: String, conflict: Conflict, peer: String? = nil, rule: String? = nil, database: String = "default"
    ) {
        self.ticket = ticket
        self.resolver = resolver
        self.database = database
        self.conflict = conflict
        self.peer = peer
        self.rule = rule
    }

    /// The conflicted document's id (``Conflict/documentID``).
    public var documentID: String { conflict.documentID }
}
