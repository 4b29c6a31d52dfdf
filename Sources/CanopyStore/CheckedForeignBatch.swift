import CanopyCore

/// Foreign revisions whose input checks (document id, canonical body, history length, content
/// hash) passed, ready for `DocumentStore.bulkInsertForeign(checked:)`, with the documents that
/// failed them.
///
/// Invariant: only `DocumentStore.checkForeign` makes one (its stored properties and initialiser
/// are internal to the store), so every revision in it was checked and nothing unchecked can be
/// written through it. Removing documents keeps that true.
package struct CheckedForeignBatch: Sendable {
    /// The revisions that passed, in input order, with their canonical bodies.
    let revisions: [DocumentStore.CheckedRevision]
    /// One problem per rejected document, in the order of each document's first failing revision
    /// (the order in which `bulkInsertForeign(_:)` would report them one call at a time). Every
    /// one names its document; none of that document's revisions is in the batch.
    package let rejected: [StoreInputError]

    init(revisions: [DocumentStore.CheckedRevision], rejected: [StoreInputError]) {
        self.revisions = revisions
        self.rejected = rejected
    }

    /// True when no revision passed.
    package var isEmpty: Bool { revisions.isEmpty }

    /// How many revisions passed.
    package var count: Int { revisions.count }

    /// The batches one after the other, as one batch (written in one transaction). Still checked:
    /// each part was.
    package static func concatenating(_ batches: [CheckedForeignBatch]) -> CheckedForeignBatch {
        guard batches.count > 1 else { return batches.first ?? CheckedForeignBatch(revisions: [], rejected: []) }
        return CheckedForeignBatch(revisions: batches.flatMap(\.revisions), rejected: batches.flatMap(\.rejected))
    }

    /// The batch without `documentID`'s revisions (after the write reported it invalid).
    package func removing(documentID: String) -> CheckedForeignBatch {
        CheckedForeignBatch(revisions: revisions.filter { $0.documentID != documentID }, rejected: rejected)
    }
}

extension DocumentStore {
    /// Checks a batch of foreign revisions without touching any database: pure and thread-safe,
    /// so it may run on any thread while the store writes something else. A document with any
    /// failing revision is left out whole and listed in `rejected`; a problem that names no
    /// document (too many revisions, a malformed document id) is thrown, since the batch as a
    /// whole cannot be trusted.
    package static func checkForeign(
        _ revisions: [ForeignRevision], idCheck: RevisionIDCheck = .contentHash
    ) throws(StoreInputError) -> CheckedForeignBatch {
        guard revisions.count <= StoreLimits.foreignBatchCountMax else {
            throw .batchTooLarge(count: revisions.count, limit: StoreLimits.foreignBatchCountMax)
        }
        if let checked = try? checkAll(revisions, idCheck: idCheck) {
            return CheckedForeignBatch(revisions: checked, rejected: [])
        }
        return try checkOneByOne(revisions, idCheck: idCheck)
    }

    /// The rare path, once the parallel check found a problem: checks in input order, keeping the
    /// first problem of every document and dropping all of a rejected document's revisions.
    private static func checkOneByOne(
        _ revisions: [ForeignRevision], idCheck: RevisionIDCheck
    ) throws(StoreInputError) -> CheckedForeignBatch {
        var passed: [CheckedRevision] = []
        var rejected: [StoreInputError] = []
        var rejectedIDs = Set<String>()
        for revision in revisions {
            do throws(StoreInputError) {
                passed.append(try check(revision, idCheck: idCheck, revsLimit: StoreLimits.revsLimitMax))
            } catch {
                guard let documentID = error.documentID else { throw error }
                if rejectedIDs.insert(documentID).inserted { rejected.append(error) }
            }
        }
        passed.removeAll { rejectedIDs.contains($0.documentID) }
        return CheckedForeignBatch(revisions: passed, rejected: rejected)
    }
}
