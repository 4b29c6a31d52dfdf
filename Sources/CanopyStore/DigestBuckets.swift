import CanopyCore

/// The lowest level of the digest tree (`Protocol/digests.md`), kept in `digest_buckets`: per
/// bucket, how many documents it holds, how many of them are deleted, and the exclusive-or of
/// their digests. Every write transaction changes the buckets of the documents it writes, in the
/// same transaction (`WriteContext.noteDocument`), so the database's digest and its counts are
/// read in O(1), and they are exactly what the documents' rows say at every commit.
///
/// The store keeps a copy in memory, loaded at open and replaced after each commit that
/// changed it; a transaction that rolls back leaves it as it was.
struct DigestBuckets: Sendable, Equatable {
    var documents: [Int64]
    var deleted: [Int64]
    var digests: [DatabaseDigest]

    /// Every bucket empty.
    static let empty = DigestBuckets(
        documents: Array(repeating: 0, count: DigestTree.bucketCount), deleted: Array(repeating: 0, count: DigestTree.bucketCount),
        digests: Array(repeating: .empty, count: DigestTree.bucketCount))

    /// Documents, deleted ones included.
    var documentCount: Int64 { documents.reduce(0, +) }
    /// Documents whose current revision is a deletion.
    var deletedCount: Int64 { deleted.reduce(0, +) }
    /// The database's digest: the exclusive-or of the buckets'.
    var digest: DatabaseDigest {
        var total = DatabaseDigest.empty
        for digest in digests { total.toggle(digest) }
        return total
    }

    /// Adds a document (its digest and whether its current revision is deleted) to its bucket,
    /// or takes it away (`sign` -1).
    mutating func apply(bucket: Int, digest: DatabaseDigest, deleted isDeleted: Bool, sign: Int64) {
        documents[bucket] += sign
        if isDeleted { deleted[bucket] += sign }
        digests[bucket].toggle(digest)
    }

    /// The buckets as the table holds them (empty ones have no row).
    static func load(_ db: Database) throws -> DigestBuckets {
        var buckets = DigestBuckets.empty
        let rows = try db.query("SELECT bucket, documents, deleted, digest FROM digest_buckets") { row in
            (row.int(0), row.int64(1), row.int64(2), DatabaseDigest(bytes: row.borrowedBlob(3)))
        }
        for (bucket, documents, deleted, digest) in rows {
            guard DigestTree.bucketCount > bucket, bucket >= 0, let digest else {
                throw StoreError.corrupt(detail: "digest bucket \(bucket)")
            }
            buckets.documents[bucket] = documents
            buckets.deleted[bucket] = deleted
            buckets.digests[bucket] = digest
        }
        return buckets
    }

    /// The buckets computed from every document row as it is (the migration that adds the
    /// table, and the full check, which compares them with the table's).
    static func compute(_ db: Database) throws -> DigestBuckets {
        var buckets = DigestBuckets.empty
        var after: Int64 = 0
        while true {
            let page = try db.query(
                "SELECT sequence, doc_id, leaves, deleted FROM documents WHERE sequence > ? ORDER BY sequence LIMIT 4096", [.integer(after)]
            ) { row -> (Int64, String, [(revision: RevisionID, deleted: Bool)], Bool) in
                let id = row.text(1)
                let leaves = try LeafList.decode(row.borrowedBlob(2), documentID: id) { ($0, $1) }
                return (row.int64(0), id, leaves.filter { !$0.1.isClosed }.map { ($0.0, $0.1.isDeleted) }, row.int(3) != 0)
            }
            guard let last = page.last else { return buckets }
            for (_, id, open, isDeleted) in page {
                buckets.apply(bucket: DigestTree.bucket(of: id), digest: DigestTree.document(id: id, openLeaves: open), deleted: isDeleted, sign: 1)
            }
            after = last.0
        }
    }

    /// Writes the rows of `changed` buckets, in statements of 64, 16, 4 and 1 rows (so a few
    /// prepared statements serve every transaction).
    func write(_ db: Database, changed: [Int]) throws {
        var rest = changed[...]
        while !rest.isEmpty {
            let size = [64, 16, 4, 1].first { $0 <= rest.count }!
            try write(db, rest.prefix(size))
            rest = rest.dropFirst(size)
        }
    }

    private func write(_ db: Database, _ chunk: ArraySlice<Int>) throws {
        let statement = try db.statement(named: "upsert digest buckets ×\(chunk.count)") {
            "INSERT INTO digest_buckets(bucket, documents, deleted, digest) VALUES "
                + (0..<chunk.count).map { "(?\($0 * 4 + 1), ?\($0 * 4 + 2), ?\($0 * 4 + 3), ?\($0 * 4 + 4))" }.joined(separator: ", ")
                + " ON CONFLICT(bucket) DO UPDATE SET documents = excluded.documents, deleted = excluded.deleted, digest = excluded.digest"
        }
        for (offset, bucket) in chunk.enumerated() {
            let first = Int32(offset * 4 + 1)
            try statement.bind(Int64(bucket), at: first)
            try statement.bind(documents[bucket], at: first + 1)
            try statement.bind(deleted[bucket], at: first + 2)
            try statement.bind(digests[bucket].bytes, at: first + 3)
        }
        try statement.run()
    }

    /// Writes every non-empty bucket (the migration's fill).
    func writeAll(_ db: Database) throws {
        try write(db, changed: (0..<DigestTree.bucketCount).filter { documents[$0] != 0 })
    }
}

extension WriteContext {
    /// Records that this transaction wrote `documentID`'s row: its leaves and deleted flag
    /// before (nil for a new document) and after. The buckets are written before the commit.
    func noteDocument(_ documentID: String, before: (leaves: [RevTree.Node], deleted: Bool)?, after: [RevTree.Node], deleted: Bool) {
        let bucket = DigestTree.bucket(of: documentID)
        if let before {
            change(bucket, DigestTree.document(id: documentID, leaves: before.leaves), deleted: before.deleted, sign: -1)
        } else {
            newDocumentIDs.append(documentID)
        }
        change(bucket, DigestTree.document(id: documentID, leaves: after), deleted: deleted, sign: 1)
    }

    /// Records a new document whose only leaf is `leaf` (the new-chain paths).
    func noteNewDocument(_ documentID: String, leaf: RevTree.Node) {
        let deleted = leaf.kind.isDeleted
        newDocumentIDs.append(documentID)
        change(DigestTree.bucket(of: documentID), DigestTree.document(id: documentID, leaf: leaf.id, deleted: deleted), deleted: deleted, sign: 1)
    }

    private func change(_ bucket: Int, _ digest: DatabaseDigest, deleted: Bool, sign: Int64) {
        if buckets == nil {
            buckets = startingBuckets
            changedBuckets = Array(repeating: false, count: DigestTree.bucketCount)
        }
        buckets!.apply(bucket: bucket, digest: digest, deleted: deleted, sign: sign)
        changedBuckets[bucket] = true
    }

    /// The buckets this transaction changed, in order.
    var changedBucketList: [Int] { changedBuckets.indices.filter { changedBuckets[$0] } }
}
