import CanopyCore

/// A revision of a document as the local API returns it.
public struct Document: Sendable, Equatable {
    /// The document id.
    public let id: String
    /// The revision returned (the current one unless a specific revision was asked for).
    public let revision: RevisionID
    /// What the revision is.
    public let kind: RevisionKind
    /// The body (`{}` for deletions).
    public let body: JSONValue
    /// The revision and its stored ancestors, newest first (CouchDB's `_revisions`), when asked for.
    public var history: [RevisionID]?
    /// Other open live leaves (CouchDB's `_conflicts`), canonical order, when asked for.
    public var conflicts: [RevisionID]?
    /// Other open deleted leaves (CouchDB's `_deleted_conflicts`), when asked for.
    public var deletedConflicts: [RevisionID]?

    /// True for any deletion (a user's, a resolution's or a closing tombstone).
    public var isDeleted: Bool { kind.isDeleted }
}

/// What `get` adds to the returned document.
public struct GetOptions: OptionSet, Sendable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    /// Fill `Document.history`.
    public static let revisions = GetOptions(rawValue: 1)
    /// Fill `Document.conflicts` and `Document.deletedConflicts`.
    public static let conflicts = GetOptions(rawValue: 2)
}

/// A local write that met a newer revision than the one it named.
public struct ConflictingWrite: Sendable {
    /// The document.
    public let documentID: String
    /// The revision the write named (nil: it meant to create the document).
    public let replacing: RevisionID?
    /// The body the write proposed (nil for a deletion).
    public let proposed: JSONValue?
    /// The document's current revision.
    public let current: Document
}

/// How a local write handles a stale `replacing` revision (`Protocol/design.md` §3.7, optimistic concurrency).
public enum WriteConcurrency: Sendable {
    /// Fail with `StoreError.conflict` (the default).
    case failOnConflict
    /// Write on top of the current revision anyway.
    case lastWriteWins
    /// Ask the closure: it returns the body to write on top of the current revision, or nil to
    /// give up with `StoreError.conflict`. It runs under the store's lock and must not call the
    /// store; if it throws, the write fails with `StoreError.handlerFailed`.
    case handler(@Sendable (ConflictingWrite) throws -> JSONValue?)
}

/// One local write of a batch (`DocumentStore.putBatch`).
public struct LocalWrite: Sendable {
    /// The document.
    public let documentID: String
    /// The new body, or nil to delete the document.
    public let body: JSONValue?
    /// The revision replaced (nil to create, or to re-create a deleted document).
    public let replacing: RevisionID?

    /// A write of `body` (nil deletes) replacing `replacing`.
    public init(documentID: String, body: JSONValue?, replacing: RevisionID?) {
        self.documentID = documentID
        self.body = body
        self.replacing = replacing
    }
}

/// What `DocumentStore.putBulk` did with one write.
public enum BulkWriteResult: Sendable, Equatable {
    /// Written as this new revision.
    case written(RevisionID)
    /// Stale: the revision replaced is not an open leaf, or is one of a document that does not
    /// exist (or the document exists and no revision was named). Nothing was written for it;
    /// `current` is the document's current revision, nil when it does not exist.
    case conflict(current: RevisionID?)
}
