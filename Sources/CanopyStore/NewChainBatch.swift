import CanopyCore

/// New documents that each receive one revision path (an initial sync, a batch of creations),
/// written with multi-row INSERTs: one statement per `rowsPerStatement` documents and one per
/// `rowsPerStatement` revision rows, instead of two statements per document.
///
/// Why: for 1 KiB documents SQLite's fixed cost per statement (starting the VM, opening cursors,
/// resetting) is a large part of a write. Measured in C with the store's schema and pragmas,
/// 32–40 rows per statement cut SQLite's CPU per new document from 5.3 to 4.1 µs.
///
/// Invariant: the rows written are exactly those `RevisionRows.insertNewChain` would write for
/// the items one by one, in order, with the same sequences (a property test compares the files).
/// A chunk's documents are inserted with `ON CONFLICT(doc_id) DO NOTHING`; if any of them exists
/// (or the chunk names one twice) the chunk's new rows are deleted again, its sequences given
/// back, and its items handed to the caller's one-by-one path. After such a miss the rest of the
/// batch goes one by one too: a batch that updates existing documents pays for one failed chunk,
/// not one per chunk.
struct NewChainBatch {
    /// One new document: its revision path and the leaf's canonical body. `slot` is the caller's
    /// index for the result.
    struct Item {
        let slot: Int
        let documentID: String
        let path: RevisionPath
        let body: [UInt8]
        /// The leaf's id is imported (not its content hash).
        var importedID = false
    }

    /// Rows per multi-row statement; a batch's remainder uses `smallRowsPerStatement`, then
    /// single-row statements.
    static let rowsPerStatement = 32
    static let smallRowsPerStatement = 8

    private(set) var items: [Item] = []
    /// False once a chunk met an existing document (see the type's comment).
    private var chunksEnabled = true

    /// Queues `item`; nothing is written before `flush`.
    mutating func append(_ item: Item) { items.append(item) }

    /// Writes the queued items in order. `written` is called for each item written here;
    /// `oneByOne` must write an item through the per-document path (which handles a document that
    /// exists), and is told whether a chunk of this batch already met an existing document (the
    /// batch then likely updates documents rather than creates them). The queue is empty
    /// afterwards.
    mutating func flush(
        _ context: WriteContext, written: (Item) -> Void, oneByOne: (Item, _ afterMiss: Bool) throws -> Void
    ) throws {
        var start = 0
        while start < items.count {
            let remaining = items.count - start
            guard chunksEnabled, let size = Self.chunkSize(remaining) else {
                try oneByOne(items[start], !chunksEnabled)
                start += 1
                continue
            }
            // Items are read in place by index (`for item in` would copy each, with a retain and
            // a release of its id, ancestry and body every time).
            let chunk = start..<(start + size)
            if try Self.insertDocuments(context, items, chunk) {
                var rows: [(key: Int64, row: RevisionRows.RevisionRow)] = []
                rows.reserveCapacity(size)
                var key = context.lastSequence - Int64(size)
                for index in chunk {
                    key += 1
                    RevisionRows.appendNewChainRows(
                        path: items[index].path, body: items[index].body, importedID: items[index].importedID,
                        revsLimit: context.revsLimit
                    ) {
                        rows.append((key, $0))
                    }
                }
                try Self.insertRevisions(context.db, rows[...])
                for index in chunk { written(items[index]) }
            } else {
                chunksEnabled = false
                for index in chunk { try oneByOne(items[index], true) }
            }
            start += size
        }
        items.removeAll(keepingCapacity: true)
    }

    /// The statement size for `remaining` rows, or nil when they go in single-row statements.
    private static func chunkSize(_ remaining: Int) -> Int? {
        if remaining >= rowsPerStatement { return rowsPerStatement }
        if remaining >= smallRowsPerStatement { return smallRowsPerStatement }
        return nil
    }

    /// Inserts the chunk's document rows at the next sequences. Returns false, with nothing left
    /// written and the sequences given back, when any of them was not inserted.
    private static func insertDocuments(_ context: WriteContext, _ items: [Item], _ chunk: Range<Int>) throws -> Bool {
        let count = chunk.count
        let statement = try context.db.statement(named: "insert documents ×\(count)") {
            "INSERT INTO documents(sequence, current_generation, current_digest, deleted, conflicted, leaves, doc_id, doc_key, row_check) VALUES "
                + (0..<count).map { row in
                    let p = row * 7
                    return "(?\(p + 1), ?\(p + 2), ?\(p + 3), ?\(p + 4), 0, ?\(p + 5), ?\(p + 6), ?\(p + 1), ?\(p + 7))"
                }.joined(separator: ", ")
                + " ON CONFLICT(doc_id) DO NOTHING"
        }
        let first = context.lastSequence + 1
        var borrowed: [(index: Int32, value: Statement.Borrowed)] = []
        borrowed.reserveCapacity(3 * count)
        for (offset, index) in chunk.enumerated() {
            let leaf = RevTree.Node(id: items[index].path.leaf, parent: items[index].path.parent, kind: items[index].path.kind)
            try RevisionRows.bindNewDocument(
                statement, firstParameter: Int32(offset * 7 + 1), sequence: context.nextSequence(), leaf: leaf,
                documentID: items[index].documentID, borrowed: &borrowed)
        }
        try statement.runBorrowing(borrowed)
        if context.db.changes == count {
            for index in chunk {
                let path = items[index].path
                context.noteNewDocument(items[index].documentID, leaf: RevTree.Node(id: path.leaf, parent: path.parent, kind: path.kind))
            }
            return true
        }
        // Every row inserted has a sequence from this chunk (they are all new), so this deletes
        // exactly what the statement wrote.
        try context.db.run(
            "DELETE FROM documents WHERE sequence BETWEEN ? AND ?", .integer(first), .integer(context.lastSequence))
        context.returnSequences(first: first, count: count)
        return false
    }

    /// Inserts revision rows, `rowsPerStatement` (then fewer) per statement.
    private static func insertRevisions(_ db: Database, _ rows: ArraySlice<(key: Int64, row: RevisionRows.RevisionRow)>) throws {
        var rest = rows
        while let size = chunkSize(rest.count) {
            let statement = try db.statement(named: "insert revisions ×\(size)") {
                "INSERT INTO revisions(doc_key, generation, digest, parent, kind, leaf, body, closed_child) VALUES "
                    + (0..<size).map { row in
                        let p = row * 8
                        return "(?\(p + 1), ?\(p + 2), ?\(p + 3), ?\(p + 4), ?\(p + 5), ?\(p + 6), ?\(p + 7), ?\(p + 8))"
                    }.joined(separator: ", ")
            }
            var borrowed: [(index: Int32, value: Statement.Borrowed)] = []
            borrowed.reserveCapacity(4 * size)
            for (offset, entry) in rest.prefix(size).enumerated() {
                try RevisionRows.bindRevisionRow(
                    statement, firstParameter: Int32(offset * 8 + 1), key: entry.key, row: entry.row, borrowed: &borrowed)
            }
            try statement.runBorrowing(borrowed)
            for entry in rest.prefix(size) { try RevisionRows.nameAttachments(db, body: entry.row.body) }
            rest = rest.dropFirst(size)
        }
        for entry in rest {
            try RevisionRows.insertRevisionRow(db, key: entry.key, row: entry.row)
        }
    }
}
