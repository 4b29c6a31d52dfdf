import CanopyCore

/// What `DocumentStore.checkRows` found.
public struct RowCheckReport: Sendable, Equatable {
    /// Document rows read.
    public var documents = 0
    /// Damaged documents and revisions, in sequence order, at most the check's limit.
    public var damaged: [StoredDamage] = []
    /// True when more damage was found than `damaged` lists.
    public var truncated = false
    /// Revision rows whose document key no document row has (their document's row was lost).
    public var strayRevisionRows = 0
    /// Digest buckets whose stored counts or digest are not what the document rows give
    /// (`digest_buckets` damaged, or out of step with the rows).
    public var differingDigestBuckets = 0
    /// Documents missing from `digest_index`, and its rows with a wrong hash or no document: a
    /// compare would not see those documents where they are.
    public var digestIndexDisagreements = 0
}

/// Checking every document row against itself and its revisions: damage SQLite's integrity check
/// cannot see, because the damaged row is still well formed.
extension DocumentStore {
    /// Reads every document row and its revisions, on a connection of its own (a read
    /// transaction per page of rows, so the store keeps writing meanwhile), and reports each
    /// document whose row disagrees with itself or with its revisions:
    /// - an id that is not valid UTF-8;
    /// - a row that does not match its check value (`RowCheck`: its id, key or leaf list changed);
    /// - a leaf list this build did not write, or one that is not the leaves of its revisions;
    /// - a current revision, deleted flag or conflicted flag that is not what the leaves say;
    /// - revision rows that cannot be read, or a stored body that no longer hashes to its revision id;
    ///
    /// and counts the digest buckets that are not what the rows give (recomputed from every row
    /// in one read transaction).
    ///
    /// Each is also reported through the damage handler (`setDamageHandler(_:)`), as a read that
    /// finds it would. At most `problemsMax` are listed.
    public func checkRows(problemsMax: Int = 1000) throws(StoreError) -> RowCheckReport {
        var report = RowCheckReport()
        do {
            let reader = try Database(path: db.path)
            var after: Int64 = 0
            while true {
                try reader.execute("BEGIN")
                defer { try? reader.execute("COMMIT") }
                let rows = try reader.query(
                    """
                    SELECT sequence, doc_id, leaves, deleted, doc_key, row_check, current_generation, current_digest, conflicted
                    FROM documents WHERE sequence > ? ORDER BY sequence LIMIT 512
                    """, [.integer(after)]
                ) { row -> (sequence: Int64, found: StoredDamage?, pending: PendingRow?) in
                    let sequence = row.int64(0)
                    guard let id = row.validText(1) else { return (sequence, .invalidID(row.textBytes(1)), nil) }
                    let leaves: [ChangeLeaf]
                    do {
                        leaves = try LeafList.decode(row.borrowedBlob(2), documentID: id) { ChangeLeaf(revision: $0, kind: $1) }
                    } catch {
                        return (sequence, StoredDamage(documentID: id, revision: nil, reason: "its leaf list is damaged"), nil)
                    }
                    guard !leaves.isEmpty else { return (sequence, StoredDamage(documentID: id, revision: nil, reason: "it has no leaves"), nil) }
                    if let problem = Self.rowProblem(row, leaves: leaves) {
                        return (sequence, StoredDamage(documentID: id, revision: nil, reason: problem), nil)
                    }
                    let current = row.revisionID(generation: row.int(6), digestColumn: 7)
                    return (sequence, nil, PendingRow(id: id, key: row.int64(4), leaves: leaves, current: current, conflicted: row.int(8) != 0))
                }
                guard let last = rows.last else { break }
                after = last.sequence
                report.documents += rows.count
                for row in rows {
                    let found = try row.found.map { [$0] } ?? Self.revisionProblems(reader, row.pending!)
                    for damage in found {
                        self.damage.report(damage)
                        if report.damaged.count < max(1, problemsMax) { report.damaged.append(damage) } else { report.truncated = true }
                    }
                }
            }
            report.strayRevisionRows = Int(
                try reader.scalarInt("SELECT count(*) FROM revisions WHERE doc_key NOT IN (SELECT doc_key FROM documents)") ?? 0)
            try reader.execute("BEGIN")
            defer { try? reader.execute("COMMIT") }
            let stored = try DigestBuckets.load(reader)
            let computed = try DigestBuckets.compute(reader)
            report.differingDigestBuckets = (0..<DigestTree.bucketCount).filter { bucket in
                stored.documents[bucket] != computed.documents[bucket] || stored.deleted[bucket] != computed.deleted[bucket]
                    || stored.digests[bucket] != computed.digests[bucket]
            }.count
            report.digestIndexDisagreements = try DigestIndex.disagreements(reader)
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError.wrap(error)
        }
        return report
    }

    /// A sound-looking document row whose revisions are still to be compared with it.
    private struct PendingRow {
        let id: String
        let key: Int64
        let leaves: [ChangeLeaf]
        let current: RevisionID?
        let conflicted: Bool
    }

    /// What is wrong between a document's row and its revision rows, one entry each.
    private static func revisionProblems(_ db: Database, _ row: PendingRow) throws -> [StoredDamage] {
        func damage(_ reason: String, _ revision: RevisionID? = nil) -> StoredDamage {
            StoredDamage(documentID: row.id, revision: revision, reason: reason)
        }
        let tree: RevTree
        do {
            tree = try RevisionRows.loadTree(db, key: row.key, documentID: row.id)
        } catch let error as StoreError {
            guard case .corrupt = error else { throw error }
            return [damage("its revision rows are damaged (\(error.description))")]
        }
        var found: [StoredDamage] = []
        let leaves = tree.leaves
        let listed = row.leaves.map { "\($0.revision) \($0.kind)" }
        let held = leaves.map { "\($0.id) \($0.kind)" }
        if listed != held {
            found.append(damage(
                "its row lists the leaves [\(listed.joined(separator: ", "))] but its revisions hold [\(held.joined(separator: ", "))]"))
        }
        let current = RevTree.current(amongLeaves: leaves)
        if let current, row.current != current.id {
            found.append(damage("its row names \(row.current.map(String.init(describing:)) ?? "no revision") as current, its revisions \(current.id)"))
        }
        if !leaves.isEmpty, row.conflicted != !RevTree.conflicting(amongLeaves: leaves).isEmpty {
            found.append(damage("its conflicted flag says \(row.conflicted ? "conflicted" : "not conflicted"), its revisions the opposite"))
        }
        let statement = try db.statement("SELECT generation, digest, kind, body FROM revisions WHERE doc_key = ? AND body IS NOT NULL")
        defer { statement.reset() }
        try statement.bind(row.key, at: 1)
        while try statement.step() {
            guard let revision = statement.revisionID(generation: statement.int(0), digestColumn: 1),
                let node = tree.node(revision), let body = statement.blob(3)
            else { continue }
            if !RevisionRows.bodyMatches(body, of: node, kindColumn: statement.int(2)) {
                found.append(damage(RevisionRows.bodyMismatch, revision))
            }
        }
        return found
    }
}
