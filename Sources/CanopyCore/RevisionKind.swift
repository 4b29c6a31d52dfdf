/// What a revision is, beyond its body. The kind is part of the revision's content address (it is
/// the flag byte hashed by `RevisionHasher`), so two nodes can never disagree about it.
///
/// - `live`: a user's edit.
/// - `deleted`: a user's deletion; deletes-win sees it.
/// - `closed`: a tombstone written by conflict resolution to end a losing branch. It is
///   bookkeeping: it never takes part in a conflict and is never mistaken for a user's deletion.
/// - `resolvedLive` / `resolvedDeleted`: the body or deletion a conflict resolution wrote as a
///   child of the winning leaf. If two nodes' resolvers disagree, the conflict between their
///   outputs is settled by the automatic rule without asking a resolver again, so a
///   non-deterministic resolver costs at most one more round, never an endless exchange.
public enum RevisionKind: UInt8, Sendable, Hashable, CaseIterable, Codable {
    case live = 0
    case deleted = 1
    case closed = 3
    case resolvedLive = 4
    case resolvedDeleted = 5

    /// True for a deletion of any kind (a user's, a resolution's, or a closing tombstone).
    public var isDeleted: Bool { rawValue & 1 != 0 }
    /// True for a closing tombstone.
    public var isClosed: Bool { self == .closed }
    /// True for revisions written by conflict resolution (closing tombstones included).
    public var isResolution: Bool { self == .closed || self == .resolvedLive || self == .resolvedDeleted }
}
