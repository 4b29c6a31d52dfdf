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

    /// A foreign revision.
    public init(documentID: String, path: RevisionPath, body: Body) {
        self.documentID = documentID
        self.path = path
        self.body = body
    }
}

/// How `bulkInsertForeign` checks revision ids.
public enum RevisionIDCheck: Sendable {
    /// Every leaf id must be the content hash of its parent, kind and body (`RevisionHasher`):
    /// a peer that lies about a revision id is rejected. Use for all replication input.
    case contentHash
    /// Ids are taken as given. Only for importing data from systems whose revision ids are not
    /// Canopy's content hashes (CouchDB's are MD5 over Erlang terms).
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
    }

    /// The document.
    public let documentID: String
    /// Revisions new to this store, oldest first: received ones, then any the resolution wrote.
    public let added: [RevisionID]
    /// The conflict outcome.
    public let resolution: Resolution
    /// The current revision after the batch.
    public let current: RevisionID
    /// Whether the current revision is a deletion.
    public let currentIsDeleted: Bool

    /// True when the batch taught the store nothing about this document.
    public var alreadyKnown: Bool { added.isEmpty }
}
