import CanopyCore

/// One entry of the changes feed: a document at the sequence of its latest change.
public struct Change: Sendable, Equatable {
    /// The sequence of the document's latest change.
    public let sequence: Int64
    /// The document.
    public let documentID: String
    /// All leaves (open and closed), in canonical order (`RevTree.canonicalOrder`): live before
    /// deleted, then newest first. A closing tombstone counts as deleted, so it can come before an
    /// open deleted leaf; `current` skips it as `RevTree.current` does.
    public let leaves: [ChangeLeaf]
    /// Whether the current revision is a deletion.
    public let deleted: Bool
    /// The store's own key for the document (stable, never reused): a `RevisionRequest` that
    /// carries it back skips looking the document up by id.
    public let documentKey: Int64

    /// The current revision: the first open leaf, or the first leaf when every one is closed.
    public var current: RevisionID { (leaves.first { !$0.kind.isClosed } ?? leaves[0]).revision }
}

/// A leaf revision in a `Change`.
public struct ChangeLeaf: Sendable, Equatable {
    public let revision: RevisionID
    public let kind: RevisionKind
}

/// One page of the changes feed.
public struct ChangesPage: Sendable {
    /// The readable documents of the page, in sequence order.
    public let changes: [Change]
    /// The sequence of the last row the page read, damaged rows included: where the next page
    /// starts. Nil when the feed had nothing after `since`.
    public let lastSequence: Int64?
    /// True when the feed had fewer rows after `since` than the page's limit.
    public let reachedEnd: Bool
    /// Rows that could not be read (also reported through the store's damage handler): they are
    /// left out of `changes`, not read with substitutions.
    public let damaged: [StoredDamage]
}

/// The changes feed.
extension DocumentStore {
    /// Documents changed after `since`, in sequence order, each once at its latest sequence,
    /// at most `limit` (capped at `StoreLimits.changesLimitMax`). Local documents never appear.
    /// A damaged row (an id that is not valid UTF-8, a leaf list this build did not write, a row
    /// that does not match its `RowCheck`, a deleted flag that is not its current leaf's) is left
    /// out and reported (`StoredDamage`); the rest of the page is read.
    public func changesPage(since: Int64, limit: Int = StoreLimits.changesLimitMax) throws(StoreError) -> ChangesPage {
        let count = max(0, min(limit, StoreLimits.changesLimitMax))
        var damaged: [StoredDamage] = []
        var rows = 0
        var lastSequence: Int64?
        let changes = try readSnapshot { db in
            try db.query(
                "SELECT sequence, doc_id, leaves, deleted, doc_key, row_check FROM documents WHERE sequence > ? ORDER BY sequence LIMIT ?",
                [.integer(since), .integer(Int64(count))]
            ) { row -> Change? in
                rows += 1
                let sequence = row.int64(0)
                lastSequence = sequence
                guard let id = row.validText(1) else {
                    damaged.append(.invalidID(row.textBytes(1)))
                    return nil
                }
                let leaves: [ChangeLeaf]
                do {
                    leaves = try LeafList.decode(row.borrowedBlob(2), documentID: id) { ChangeLeaf(revision: $0, kind: $1) }
                } catch {
                    damaged.append(StoredDamage(documentID: id, revision: nil, reason: "its leaf list is damaged"))
                    return nil
                }
                guard !leaves.isEmpty else {
                    damaged.append(StoredDamage(documentID: id, revision: nil, reason: "it has no leaves"))
                    return nil
                }
                if let problem = Self.rowProblem(row, leaves: leaves) {
                    damaged.append(StoredDamage(documentID: id, revision: nil, reason: problem))
                    return nil
                }
                return Change(sequence: sequence, documentID: id, leaves: leaves, deleted: row.int(3) != 0, documentKey: row.int64(4))
            }
        }
        for report in damaged { damage.report(report) }
        return ChangesPage(
            changes: changes.compactMap { $0 }, lastSequence: lastSequence, reachedEnd: rows < count, damaged: damaged)
    }

    /// What is wrong with the current row of a `documents` query whose columns 1…5 are `doc_id,
    /// leaves, deleted, doc_key, row_check`, given its decoded leaves: its check value does not
    /// match (`RowCheck`), or its deleted flag is not its current leaf's. Nil for a sound row.
    static func rowProblem(_ row: Statement, leaves: [ChangeLeaf]) -> String? {
        let check = RowCheck.value(documentKey: row.int64(4), leaves: row.borrowedBlob(2), idBytes: row.borrowedText(1))
        if row.isNull(5) || row.int64(5) != check {
            return "its row no longer matches its check value: its id, key or leaf list was damaged in the file"
        }
        let current = leaves.first { !$0.kind.isClosed } ?? leaves[0]
        if (row.int(3) != 0) != current.kind.isDeleted {
            return "its deleted flag says \(row.int(3) != 0 ? "deleted" : "not deleted") but its current revision \(current.revision) is \(current.kind.isDeleted ? "a deletion" : "not a deletion")"
        }
        return nil
    }

    /// The readable documents changed after `since` (`changesPage(since:limit:)` without the
    /// page's bounds: fewer than `limit` does not mean the feed's end when rows were damaged).
    public func changes(since: Int64, limit: Int = StoreLimits.changesLimitMax) throws(StoreError) -> [Change] {
        try changesPage(since: since, limit: limit).changes
    }
}
