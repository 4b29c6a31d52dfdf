import CanopyCore
import Testing
@testable import CanopyStore

/// `NewChainBatch` (multi-row writes of new documents) must write exactly what the one-by-one
/// paths write. These tests replay seeded random batches on two stores, one through the batched
/// path and one through the general path, and compare results and every row.
@Suite("Batched new documents")
struct NewChainBatchTests {
    @Test("foreign batches give the same results and rows batched as through the general path", arguments: [1, 2, 3, 4])
    func foreignBatchesMatchGeneralPath(seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        let batched = try TestStore(.init(revsLimit: 3))
        let general = try TestStore(.init(revsLimit: 3))
        for _ in 0..<6 {
            // Ids from a pool, so a batch mixes new documents, existing ones and repeats.
            let batch = try (0..<Int.random(in: 1...90, using: &random)).map { _ in
                try randomForeign("d\(random.next() % 150)", chainLengths: 1...5, seeds: 1_000, &random)
            }
            let batchedResults = try batched.store.bulkInsertForeign(batch)
            // Every revision sent twice: each document has two revisions and takes the general path.
            let generalResults = try general.store.bulkInsertForeign(batch.flatMap { [$0, $0] })
            #expect(batchedResults == generalResults)
            #expect(try storeRows(batched.path) == storeRows(general.path))
        }
        #expect(try batched.store.integrityCheck() == "ok")
    }

    @Test("local batches give the same results and rows batched as put one by one", arguments: [1, 2, 3])
    func localBatchesMatchSinglePuts(seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        let batched = try TestStore()
        let single = try TestStore()
        var known: [String: RevisionID] = [:]
        for round in 0..<5 {
            var writes: [LocalWrite] = []
            for _ in 0..<Int.random(in: 1...90, using: &random) {
                let id = "p\(random.next() % 120)"
                let value = body(round, "r\(random.next() % 1_000)")
                // Creations (some of ids that exist or repeat), updates and deletions of known documents.
                switch (known[id], random.next() % 4) {
                case (let current?, 0): writes.append(LocalWrite(documentID: id, body: nil, replacing: current))
                case (let current?, 1): writes.append(LocalWrite(documentID: id, body: value, replacing: current))
                default: writes.append(LocalWrite(documentID: id, body: value, replacing: nil))
                }
            }
            let batchedResults = try batched.store.putBatch(writes, concurrency: .lastWriteWins)
            let singleResults = try writes.map { write in
                try single.store.putBatch([write], concurrency: .lastWriteWins)[0]
            }
            #expect(batchedResults == singleResults)
            #expect(try storeRows(batched.path) == storeRows(single.path))
            for (write, revision) in zip(writes, batchedResults) { known[write.documentID] = revision }
        }
    }

    @Test("a new document's result holding its path reports the same as the list the general path builds")
    func newChainResultMatchesList() throws {
        let links = chain(5, seed: "result")
        let ids = links.map(\.id)
        for (kind, ancestors) in [(RevisionKind.live, Array(ids.dropFirst())), (.deleted, []), (.live, Array(ids.dropFirst().prefix(2)))] {
            let path = try RevisionPath(leaf: ids[0], kind: kind, ancestors: ancestors)
            let held = RevisionRows.newChainResult(documentID: "d", path: path)
            let listed = ForeignDocumentResult(
                documentID: "d", added: ancestors.reversed() + [ids[0]], resolution: .notConflicted, current: ids[0],
                currentIsDeleted: kind.isDeleted)
            #expect(held == listed)
            #expect(held.added == listed.added && held.added.last == ids[0])
            #expect(held.lastAdded == listed.lastAdded && !held.alreadyKnown)
        }
        let nothing = ForeignDocumentResult(documentID: "d", added: [], resolution: .notConflicted, current: ids[0], currentIsDeleted: false)
        #expect(nothing.alreadyKnown && nothing.lastAdded == nil)
        #expect(nothing != RevisionRows.newChainResult(documentID: "d", path: try RevisionPath(leaf: ids[0], kind: .live, ancestors: [])))
    }

    @Test("a one-leaf list bound in place stores the bytes of any leaf list and unpacks to its leaf")
    func singleLeafList() throws {
        let directory = TemporaryDirectory()
        let db = try Database(path: directory.path("db.sqlite"))
        try db.execute("CREATE TABLE t (n INTEGER PRIMARY KEY, leaves BLOB)")
        let insert = try db.cached("INSERT INTO t(n, leaves) VALUES (?, ?)")
        for (n, link) in chain(40, seed: "leaf").enumerated() {
            let kind: RevisionKind = n % 3 == 0 ? .deleted : .live
            let leaf = RevTree.Node(id: link.id, parent: nil, kind: kind)
            try insert.bind(Int64(n), at: 1)
            try insert.runBorrowing([(2, .singleLeafList(leaf))])
            let bytes = try db.queryFirst("SELECT leaves FROM t WHERE n = ?", [.integer(Int64(n))]) { $0.blob(0) } ?? nil
            #expect(bytes == LeafList.encode([leaf]))
            let decoded = try LeafList.decode(bytes ?? [], documentID: "d")
            #expect(decoded.map(\.revision) == [link.id] && decoded.map(\.kind) == [kind])
        }
    }

    @Test("a chunk that meets an existing document is undone and written one by one, with no sequence skipped")
    func chunkWithExistingDocument() throws {
        let test = try TestStore()
        try test.store.bulkInsertForeign([try foreign("doc-20", body: body(0))])
        let batch = try (0..<40).map { n in try foreign("doc-\(n)", body: body(n)) }
        let results = try test.store.bulkInsertForeign(batch)
        #expect(results.map(\.documentID) == batch.map(\.documentID))
        #expect(results[20].resolution == .resolved)
        #expect(test.store.lastSequence == 41)
        #expect(try test.store.documentCount == 40)
        let sequences = try test.store.changes(since: 0, limit: 100).map(\.sequence)
        #expect(sequences == Array(2...41))
    }
}
