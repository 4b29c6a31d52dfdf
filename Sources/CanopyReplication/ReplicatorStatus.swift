import CanopyCore
import CanopyStore

/// A replicator's activity (Couchbase Lite's levels, `Protocol/design.md` §4.4).
public enum ReplicatorState: String, Sendable, Codable, CaseIterable {
    /// Not running: finished a one-shot replication, stopped, or failed permanently.
    case stopped
    /// The peer is unreachable; a retry is scheduled with backoff.
    case offline
    /// Dialling or handshaking.
    case connecting
    /// Caught up (continuous mode): waiting for new changes.
    case idle
    /// Transferring changes.
    case busy
    /// The peer refused this database's channel: it does not share the database with this node.
    /// Asked again with backoff, so a share the peer makes later is picked up.
    case unshared
    /// A non-retryable error (for example the peer violated the protocol); see `lastError`.
    case error
}

/// What the peer takes of this node's changes on the open connection, as its `hello` and its
/// subscription say (replication is receiver-driven: a peer that does not subscribe takes none of
/// this node's writes, however this node is configured).
public enum PeerIntake: Sendable, Equatable {
    /// It subscribed without a filter: every change.
    case everything
    /// Its `hello` says it will not subscribe: what this node writes stays here.
    case nothing
    /// It subscribed for the documents whose id starts with this prefix only.
    case prefix(String)
    /// It subscribed for this many document ids only.
    case documentIDs(Int)

    /// For people: `everything`, `nothing`, `ids starting P`, `N document ids`.
    public var summary: String {
        switch self {
        case .everything: "everything"
        case .nothing: "nothing"
        case .prefix(let prefix): "ids starting \(prefix)"
        case .documentIDs(let count): "\(count) document id\(count == 1 ? "" : "s")"
        }
    }
}

/// Progress of a replication: revisions completed of those known so far. `total` grows as the
/// changes feed reveals more work, as in Couchbase Lite.
public struct ReplicationProgress: Sendable, Equatable, Codable {
    /// Changes entries fully handled (written on the target, or found already there).
    public var completed: UInt64 = 0
    /// Changes entries seen so far.
    public var total: UInt64 = 0

    /// Creates a progress value.
    public init(completed: UInt64 = 0, total: UInt64 = 0) {
        self.completed = completed
        self.total = total
    }
}

/// Direction of a replication relative to this node.
public enum ReplicationDirection: String, Sendable, Codable, CaseIterable {
    /// This node sends its changes.
    case push
    /// This node receives the peer's changes.
    case pull
    /// Both.
    case both

    /// True if this node sends.
    public var pushes: Bool { self != .pull }
    /// True if this node receives.
    public var pulls: Bool { self != .push }
}

/// Whether a replication runs until stopped or once.
public enum ReplicationMode: String, Sendable, Equatable, CaseIterable, Codable {
    /// Keep the connection and push new changes as they commit.
    case continuous
    /// Replicate what is there, then stop.
    case once
}

/// What happened to one document during replication.
public enum DocumentEventKind: String, Sendable, Codable, CaseIterable {
    /// Revisions of the document arrived from the peer and were written; the event's revision is
    /// the document's current revision after the write (and `deleted` says whether it is a
    /// deletion).
    case pulled
    /// The peer acknowledged a revision of the document.
    case pushed
    /// Received revisions left the document conflicted (`conflict` says how, before the
    /// policy acted).
    case conflictDetected
    /// A conflict the received revisions caused was settled by the node's policy.
    case conflictResolved
    /// The conflict is kept for the resolver its rule names (`detail`), which has not answered yet.
    case conflictAwaitingResolver
    /// The resolver threw (or timed out); the conflict is kept and retried.
    case resolutionFailed
    /// The peer sent something for the document that was rejected (bad id, bad body, lying hash).
    case rejected
    /// The peer refused what this node pushed for the document (it says why in `detail`).
    case refusedByPeer
}

/// A document event.
public struct DocumentEvent: Sendable, Equatable {
    /// What happened.
    public var kind: DocumentEventKind
    /// The document.
    public var documentID: String
    /// The revision concerned, if any.
    public var revision: RevisionID?
    /// Details (the error for `resolutionFailed` and `rejected`).
    public var detail: String?
    /// For `pulled`: the document's current revision is a deletion.
    public var deleted: Bool
    /// For the conflict kinds: the conflict as the write found it.
    public var conflict: DetectedConflict?
    /// For `resolutionFailed`: the resolver client whose offer failed, when one did.
    public var resolver: String?

    /// Creates an event.
    public init(
        kind: DocumentEventKind, documentID: String, revision: RevisionID? = nil, detail: String? = nil, deleted: Bool = false,
        conflict: DetectedConflict? = nil, resolver: String? = nil
    ) {
        self.kind = kind
        self.documentID = documentID
        self.revision = revision
        self.detail = detail
        self.deleted = deleted
        self.conflict = conflict
        self.resolver = resolver
    }

    /// The conflict events of one written document, in order: `conflictDetected` when the write
    /// left it conflicted, then how the policy left it (`conflictResolved` with `detail` naming
    /// who settled it, `resolutionFailed`, or `conflictAwaitingResolver` naming the resolver).
    /// A conflict this node kept that the written revisions themselves ended (another node's
    /// resolution arriving first) gets `conflictResolved` with `detail` `arrivedBy`: `peer` for
    /// replication, `import` for an import. A document the write added nothing to (a re-sent
    /// revision) gets none.
    public static func conflictEvents(for result: ForeignDocumentResult, arrivedBy: String = "peer") -> [DocumentEvent] {
        guard let conflict = result.conflict else {
            if case .failed(let reason) = result.resolution {
                return [DocumentEvent(kind: .resolutionFailed, documentID: result.documentID, detail: reason)]
            }
            if result.settledByRevisions {
                return [DocumentEvent(kind: .conflictResolved, documentID: result.documentID, revision: result.current, detail: arrivedBy)]
            }
            return []
        }
        let id = result.documentID
        let detected = DocumentEvent(kind: .conflictDetected, documentID: id, detail: conflict.rule, conflict: conflict)
        switch result.resolution {
        case .notConflicted, .kept:
            return [detected]
        case .resolved:
            return [detected, DocumentEvent(kind: .conflictResolved, documentID: id, revision: result.current, detail: conflict.settledBy, conflict: conflict)]
        case .failed(let reason):
            return [detected, DocumentEvent(kind: .resolutionFailed, documentID: id, detail: reason, conflict: conflict)]
        case .awaiting(let resolver):
            return [detected, DocumentEvent(kind: .conflictAwaitingResolver, documentID: id, revision: result.current, detail: resolver, conflict: conflict)]
        }
    }

    /// A scan's events for one document: how the policy left each conflict it settled or routed
    /// (no `conflictDetected`: each was detected when it arose). A conflict still waiting carries
    /// no `conflict`, which tells `ResolverOffers.observe` it was found again, not changed.
    package static func scanEvents(_ result: ForeignDocumentResult) -> [DocumentEvent] {
        DocumentEvent.conflictEvents(for: result).compactMap { event in
            switch event.kind {
            case .conflictDetected: return nil
            case .conflictAwaitingResolver:
                return DocumentEvent(kind: event.kind, documentID: event.documentID, revision: event.revision, detail: event.detail)
            default: return event
            }
        }
    }
}
