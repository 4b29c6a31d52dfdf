import CanopyCore

/// One entry of the changes feed: a document at the sequence of its latest change.
public struct Change: Sendable, Equatable {
    /// The sequence of the document's latest change.
    public let sequence: Int64
    /// The document.
    public let documentID: String
    /// All leaves (open and closed), canonical order: the current revision first.
    public let leaves: [ChangeLeaf]
    /// Whether the current revision is a deletion.
    public let deleted: Bool
    /// The store's own key for the document (stable, never reused): a `RevisionRequest` that
    /// carries it back skips looking the document up by id.
    public let documentKey: Int64

    /// The current revision.
    public var current: RevisionID { leaves[0].revision }
}

/// A leaf revision in a `Change`.
public struct ChangeLeaf: Sendable, Equatable {
    public let revision: RevisionID
    public let kind: RevisionKind
}

/// The changes feed.
extension DocumentStore {
    /// Documents changed after `since`, in sequence order, each once at its latest sequence,
    /// at most `limit` (capped at `StoreLimits.changesLimitMax`). Local documents never appear.
    public func changes(since: Int64, limit: Int = StoreLimits.changesLimitMax) throws(StoreError) -> [Change] {
        let count = max(0, min(limit, StoreLimits.changesLimitMax))
        return try readSnapshot { db in
            try db.query(
                "SELECT sequence, doc_id, leaves, deleted, doc_key FROM documents WHERE sequence > ? ORDER BY sequence LIMIT ?",
                [.integer(since), .integer(Int64(count))]
            ) { row in
                let id = row.text(1)
                let leaves = try LeafList.decode(row.borrowedBlob(2), documentID: id) { ChangeLeaf(revision: $0, kind: $1) }
                guard !leaves.isEmpty else { throw StoreError.corrupt(detail: "document \"\(id.prefix(80))\" has no leaves") }
                return Change(sequence: row.int64(0), documentID: id, leaves: leaves, deleted: row.int(3) != 0, documentKey: row.int64(4))
            }
        }
    }
}
