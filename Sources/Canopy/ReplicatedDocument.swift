import CanopyReplication

/// One document a ``Replicator`` replicated, and what became of it: what Couchbase Lite's
/// document replication listener reports, as a value of ``Replicator/documentEvents``.
///
/// ```swift
/// for await document in replicator.documentEvents {
///     switch document.event {
///     case .pulled: refresh(document.documentID, in: document.database)
///     case .conflictAwaitingResolver, .resolutionFailed: showConflictBadge(document.documentID)
///     case .rejected, .refusedByPeer: log(document.documentID, document.detail ?? "")
///     default: break
///     }
/// }
/// ```
///
/// Documents this node pushed are not reported one by one: the peer acknowledges a batch, not
/// each document, so only the documents it refused show (``Event/refusedByPeer``). To know that
/// the peer holds this node's changes, await ``Replicator/sync()``.
public struct ReplicatedDocument: Sendable, Equatable {
    /// What replication did to the document. The raw value is the case's name, as the
    /// replication engine's `DocumentEventKind` names it too.
    public enum Event: String, Sendable, Equatable, CaseIterable {
        /// The peer's changes to the document arrived and were written: the document now is at
        /// ``ReplicatedDocument/revision`` (a deletion when ``ReplicatedDocument/deleted``).
        /// Read it again to show the new content.
        case pulled
        /// The peer's changes made the document conflicted: both sides edited it. The database's
        /// conflict policy acts next, and one of the three events below follows;
        /// ``ReplicatedDocument/detail`` names the rule that applies, when one does.
        case conflictDetected
        /// The conflict was settled: the document is at ``ReplicatedDocument/revision``, and
        /// ``ReplicatedDocument/detail`` says who settled it: the rule, the strategy or the
        /// resolver of the database's policy, or `peer` when the peer's revisions ended a
        /// conflict this database kept (the peer's own resolution arrived first).
        case conflictResolved
        /// The conflict is kept for the resolver its rule names (``ReplicatedDocument/detail``),
        /// which has not answered yet: the document stays conflicted until it does, or until the
        /// app settles it (`Database.resolveConflicts(id:resolver:)`).
        case conflictAwaitingResolver
        /// Settling the conflict failed (the resolver threw or timed out,
        /// ``ReplicatedDocument/detail`` says how): the conflict is kept and tried again.
        case resolutionFailed
        /// This node refused what the peer sent for the document (an id outside what the peer
        /// may write, a bad body, a revision that does not match its content); nothing of it was
        /// written. ``ReplicatedDocument/detail`` says why.
        case rejected
        /// The peer refused what this node sent for the document; the peer keeps its own copy.
        /// ``ReplicatedDocument/detail`` is the peer's reason.
        case refusedByPeer
    }

    /// What happened.
    public var event: Event
    /// The document's id.
    public var documentID: String
    /// The database the document is in (`"default"` for ``Node/database``).
    public var database: String
    /// The document's revision the event concerns: for ``Event/pulled`` and
    /// ``Event/conflictResolved`` its current revision after the write; nil when the event
    /// names none (a detected conflict, a refusal of something that was not written).
    public var revision: RevisionID?
    /// For ``Event/pulled``: the document's current revision is a deletion.
    public var deleted: Bool
    /// Why or by whom, when the event says so: the rule, the resolver, the error or the refusal's
    /// reason (see each ``Event``).
    public var detail: String?

    /// Creates a value (an app's own tests, for example).
    public init(
        event: Event, documentID: String, database: String = "default", revision: RevisionID? = nil, deleted: Bool = false,
        detail: String? = nil
    ) {
        self.event = event
        self.documentID = documentID
        self.database = database
        self.revision = revision
        self.deleted = deleted
        self.detail = detail
    }

    /// The engine's event as the library reports it; nil for the kinds it does not report
    /// (`pushed`, which the agent does not pass on either).
    init?(_ event: DocumentEvent, database: String) {
        guard let kind = Event(rawValue: event.kind.rawValue) else { return nil }
        self.init(
            event: kind, documentID: event.documentID, database: database, revision: event.revision, deleted: event.deleted,
            detail: event.detail)
    }
}
