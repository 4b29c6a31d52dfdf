import CanopyCore

/// `digest_index`: every document id under its 32-bit id hash (`DigestTree.idHash`), so the
/// documents under a node of the digest tree (`DigestNodePath`, a range of hashes) are read by a
/// range of the table's key, not a scan of every document (`Protocol/digests.md` §6). A row is
/// written in the transaction that writes its document for the first time and never changes (a
/// document row is never removed, and a later write keeps its id): it costs one insertion per
/// new document and nothing per update.
enum DigestIndex {
    /// Inserts the rows of new documents, in statements of 64, 16, 4 and 1 rows.
    static func insert(_ db: Database, _ documentIDs: [String]) throws {
        var rest = documentIDs[...]
        while !rest.isEmpty {
            let size = [64, 16, 4, 1].first { $0 <= rest.count }!
            let statement = try db.statement(named: "insert digest index ×\(size)") {
                "INSERT INTO digest_index(id_hash, doc_id) VALUES "
                    + (0..<size).map { "(?\($0 * 2 + 1), ?\($0 * 2 + 2))" }.joined(separator: ", ")
            }
            for (offset, id) in rest.prefix(size).enumerated() {
                try statement.bind(Int64(DigestTree.idHash(of: id)), at: Int32(offset * 2 + 1))
                try statement.bind(id, at: Int32(offset * 2 + 2))
            }
            try statement.run()
            rest = rest.dropFirst(size)
        }
    }

    /// The rows of every document already in the file (the migration that adds the table).
    static func fill(_ db: Database) throws {
        var after: Int64 = 0
        while true {
            let page = try db.query("SELECT sequence, doc_id FROM documents WHERE sequence > ? ORDER BY sequence LIMIT 4096", [.integer(after)]) {
                ($0.int64(0), $0.text(1))
            }
            guard let last = page.last else { return }
            try insert(db, page.map(\.1))
            after = last.0
        }
    }

    /// The document under `row`'s columns `idColumn` (its id) and `idColumn + 1` (its leaf list).
    private static func document(_ row: Statement, idColumn: Int32) throws -> DigestDocument {
        let id = row.text(idColumn)
        let leaves = try LeafList.decode(row.borrowedBlob(idColumn + 1), documentID: id) { revision, kind in
            kind.isClosed ? nil : DigestLeaf(revision: revision, deleted: kind.isDeleted)
        }
        return DigestDocument(id: id, leaves: leaves.compactMap { $0 })
    }

    /// The documents whose id hash is in `range`.
    static func documents(_ db: Database, hashes range: ClosedRange<UInt32>) throws -> [DigestDocument] {
        try db.query(
            """
            SELECT d.doc_id, d.leaves FROM digest_index i JOIN documents d ON d.doc_id = i.doc_id
            WHERE i.id_hash BETWEEN ? AND ? ORDER BY i.id_hash, i.doc_id
            """, [.integer(Int64(range.lowerBound)), .integer(Int64(range.upperBound))]
        ) { try document($0, idColumn: 0) }
    }

    /// The documents whose id starts with `prefix` (not empty), in id order.
    static func documents(_ db: Database, prefix: String) throws -> [DigestDocument] {
        var found: [DigestDocument] = []
        var from = prefix
        var inclusive = true
        while true {
            let page = try db.query(
                inclusive
                    ? "SELECT doc_id, leaves FROM documents WHERE doc_id >= ? ORDER BY doc_id LIMIT 1024"
                    : "SELECT doc_id, leaves FROM documents WHERE doc_id > ? ORDER BY doc_id LIMIT 1024", [.text(from)]
            ) { try document($0, idColumn: 0) }
            let matching = page.prefix { $0.id.hasPrefix(prefix) }
            found.append(contentsOf: matching)
            guard matching.count == page.count, let last = page.last else { return found }
            from = last.id
            inclusive = false
        }
    }

    /// Rows of the table that disagree with the documents: a document without its row, or a row
    /// whose hash is not its id's or whose document is not here (the full check).
    static func disagreements(_ db: Database) throws -> Int {
        var wrong = 0
        var matched = 0
        var after: (Int64, String) = (-1, "")
        while true {
            let page = try db.query(
                """
                SELECT i.id_hash, i.doc_id, d.sequence IS NOT NULL FROM digest_index i LEFT JOIN documents d ON d.doc_id = i.doc_id
                WHERE (i.id_hash, i.doc_id) > (?, ?) ORDER BY i.id_hash, i.doc_id LIMIT 4096
                """, [.integer(after.0), .text(after.1)]
            ) { ($0.int64(0), $0.text(1), $0.int(2) != 0) }
            guard let last = page.last else { break }
            for (hash, id, present) in page {
                if present && hash == Int64(DigestTree.idHash(of: id)) { matched += 1 } else { wrong += 1 }
            }
            after = (last.0, last.1)
        }
        let documents = try db.scalarInt("SELECT count(*) FROM documents") ?? 0
        return wrong + max(0, Int(documents) - matched)
    }
}

extension DocumentStore {
    /// The root's children, from the buckets kept in the write transactions: O(1).
    package var digestRootChildren: [DigestChild] {
        let buckets = digestBuckets
        return (0..<DigestTree.bucketCount).compactMap { bucket in
            buckets.documents[bucket] == 0
                ? nil : DigestChild(index: UInt8(bucket), documents: UInt64(buckets.documents[bucket]), digest: buckets.digests[bucket])
        }
    }

    /// The documents under any of `paths` whose id starts with `prefix` (empty: any id), each
    /// once, read from the last committed snapshot. Without a prefix they are read by ranges
    /// of `digest_index` (O(the documents under them)); with one, from the documents with that
    /// prefix.
    package func digestDocuments(prefix: String, under paths: [DigestNodePath]) throws(StoreError) -> [DigestDocument] {
        let ranges = Self.disjointRanges(paths)
        return try readSnapshot { db in
            if !prefix.isEmpty {
                return try DigestIndex.documents(db, prefix: prefix).filter { document in
                    let hash = document.idHash
                    return ranges.contains { $0.contains(hash) }
                }
            }
            var found: [DigestDocument] = []
            for range in ranges { found.append(contentsOf: try DigestIndex.documents(db, hashes: range)) }
            return found
        }
    }

    /// The hash ranges of `paths`, those under another left out.
    private static func disjointRanges(_ paths: [DigestNodePath]) -> [ClosedRange<UInt32>] {
        let sorted = Set(paths).sorted { $0.bytes.count < $1.bytes.count }
        var ranges: [ClosedRange<UInt32>] = []
        for path in sorted where !ranges.contains(where: { $0.contains(path.range.lowerBound) }) {
            ranges.append(path.range)
        }
        return ranges.sorted { $0.lowerBound < $1.lowerBound }
    }
}
