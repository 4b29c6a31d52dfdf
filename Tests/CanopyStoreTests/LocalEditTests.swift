import CanopyCore
import Testing
@testable import CanopyStore

@Suite("Local edits")
struct LocalEditTests {
    @Test("put creates a document whose revision id is the content hash and get returns it")
    func putAndGet() throws {
        let store = try TestStore().store
        let rev = try store.put(id: "doc", body: body(1), replacing: nil)
        #expect(rev == RevisionHasher.revisionID(parent: nil, kind: .live, body: body(1)))
        let document = try store.get(id: "doc")
        #expect(document.revision == rev)
        #expect(document.body == body(1))
        #expect(!document.isDeleted)
        #expect(try store.documentCount == 1)
    }

    @Test("an update names the current revision; a stale revision fails with a conflict")
    func optimisticConcurrency() throws {
        let store = try TestStore().store
        let first = try store.put(id: "doc", body: body(1), replacing: nil)
        let second = try store.put(id: "doc", body: body(2), replacing: first)
        #expect(second.generation == 2)
        #expect(throws: StoreError.self) { try store.put(id: "doc", body: body(3), replacing: first) }
        do {
            try store.put(id: "doc", body: body(3), replacing: first)
        } catch {
            guard case .conflict(let id, let replacing, let current) = error else { Issue.record("\(error)"); return }
            #expect(id == "doc" && replacing == first && current == second)
        }
        #expect(try store.get(id: "doc").revision == second)
        // Creating an existing document is a conflict too.
        #expect(throws: StoreError.self) { try store.put(id: "doc", body: body(4), replacing: nil) }
    }

    @Test("last-write-wins writes on top of the current revision despite a stale rev")
    func lastWriteWins() throws {
        let store = try TestStore().store
        let first = try store.put(id: "doc", body: body(1), replacing: nil)
        let second = try store.put(id: "doc", body: body(2), replacing: first)
        let third = try store.put(id: "doc", body: body(3), replacing: first, concurrency: .lastWriteWins)
        #expect(try store.get(id: "doc", options: .revisions).history == [third, second, first])
    }

    @Test("a conflict handler sees the current document and decides what is written")
    func conflictHandler() throws {
        let store = try TestStore().store
        let first = try store.put(id: "doc", body: .object(["a": .int(1)]), replacing: nil)
        let second = try store.put(id: "doc", body: .object(["a": .int(2)]), replacing: first)
        let merged = try store.put(
            id: "doc", body: .object(["b": .int(1)]), replacing: first,
            concurrency: .handler { conflict in
                guard case .object(var current) = conflict.current.body, case .object(let proposed)? = conflict.proposed else { return nil }
                current.merge(proposed) { $1 }
                return .object(current)
            })
        let document = try store.get(id: "doc")
        #expect(document.revision == merged)
        #expect(document.body == .object(["a": .int(2), "b": .int(1)]))
        #expect(merged.generation == second.generation + 1)
        #expect(throws: StoreError.self) {
            try store.put(id: "doc", body: body(9), replacing: first, concurrency: .handler { _ in nil })
        }
    }

    @Test("delete writes a user deletion; re-creating continues the tombstone's branch")
    func deleteAndRecreate() throws {
        let store = try TestStore().store
        let first = try store.put(id: "doc", body: body(1), replacing: nil)
        let tombstone = try store.delete(id: "doc", rev: first)
        let deleted = try store.get(id: "doc")
        #expect(deleted.isDeleted && deleted.kind == .deleted && deleted.body == .emptyObject)
        #expect(tombstone == RevisionHasher.revisionID(parent: first, kind: .deleted, body: .emptyObject))
        #expect(throws: StoreError.self) { try store.delete(id: "doc", rev: tombstone) }
        let revived = try store.put(id: "doc", body: body(2), replacing: nil)
        #expect(revived.generation == 3)
        let document = try store.get(id: "doc", options: [.revisions, .conflicts])
        #expect(document.history == [revived, tombstone, first])
        #expect(document.conflicts == [] && document.deletedConflicts == [])
        #expect(try store.documentCount == 1)
    }

    @Test("deleting or updating a document that does not exist fails")
    func missingDocument() throws {
        let store = try TestStore().store
        let ghost = RevisionHasher.revisionID(parent: nil, kind: .live, body: body(1))
        #expect(throws: StoreError.self) { try store.delete(id: "nope", rev: ghost) }
        #expect(throws: StoreError.self) { try store.put(id: "nope", body: body(1), replacing: ghost) }
        #expect(throws: StoreError.self) { try store.get(id: "nope") }
        #expect(try store.documentCount == 0)
    }

    @Test("get with rev returns an older revision while its body is kept")
    func getOlderRevision() throws {
        let store = try TestStore().store
        let first = try store.put(id: "doc", body: body(1), replacing: nil)
        try store.put(id: "doc", body: body(2), replacing: first)
        #expect(try store.get(id: "doc", rev: first).body == body(1))
        let unknown = RevisionHasher.revisionID(parent: nil, kind: .live, body: body(5))
        #expect(throws: StoreError.self) { try store.get(id: "doc", rev: unknown) }
    }

    @Test("a batch of puts is written in one transaction: one stale write fails them all")
    func putBatchIsAtomic() throws {
        let store = try TestStore().store
        let first = try store.put(id: "a", body: body(1), replacing: nil)
        let writes = [
            LocalWrite(documentID: "b", body: body(1), replacing: nil),
            LocalWrite(documentID: "a", body: body(2), replacing: first),
            LocalWrite(documentID: "a", body: body(3), replacing: first),
        ]
        #expect(throws: StoreError.self) { try store.putBatch(writes) }
        #expect(try store.documentCount == 1)
        #expect(try store.get(id: "a").revision == first)
        let revisions = try store.putBatch(Array(writes.prefix(2)))
        #expect(revisions.count == 2)
        #expect(try store.get(id: "a").revision == revisions[1])
        #expect(store.lastSequence == 3)
    }

    @Test("putBulk reports each stale write in its slot, a revision of a missing document included, and writes the rest")
    func putBulkPerDocument() throws {
        let store = try TestStore().store
        let first = try store.put(id: "a", body: body(1), replacing: nil)
        let ghost = RevisionHasher.revisionID(parent: nil, kind: .live, body: body(9))
        let results = try store.putBulk([
            LocalWrite(documentID: "nope", body: body(1), replacing: ghost),
            LocalWrite(documentID: "nope", body: nil, replacing: ghost),
            LocalWrite(documentID: "a", body: body(2), replacing: first),
            LocalWrite(documentID: "a", body: body(3), replacing: first),
            LocalWrite(documentID: "b", body: body(1), replacing: nil),
        ])
        #expect(results[0] == .conflict(current: nil) && results[1] == .conflict(current: nil))
        guard case .written(let second) = results[2] else {
            Issue.record("the edit of a was not written: \(results)")
            return
        }
        #expect(results[3] == .conflict(current: second))
        guard case .written = results[4] else {
            Issue.record("b was not written: \(results)")
            return
        }
        #expect(try store.documentCount == 2)
        #expect(throws: StoreError.self) { try store.get(id: "nope") }
    }

    @Test("the same edit made on two stores gets the same revision id")
    func identicalEditsConverge() throws {
        let a = try TestStore().store
        let b = try TestStore().store
        let revA = try a.put(id: "doc", body: body(1, "same"), replacing: nil)
        let revB = try b.put(id: "doc", body: body(1, "same"), replacing: nil)
        #expect(revA == revB)
    }
}

@Suite("Thread safety")
struct ThreadSafetyTests {
    @Test("concurrent writers and readers on one store lose no write")
    func concurrentWriters() async throws {
        let store = try TestStore().store
        let writers = 8
        let writesEach = 50
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<writers {
                group.addTask {
                    var rev: RevisionID? = nil
                    for n in 0..<writesEach {
                        rev = try store.put(id: "w\(writer)", body: body(n), replacing: rev)
                        _ = try store.changes(since: 0, limit: 10)
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(try store.documentCount == writers)
        #expect(store.lastSequence == Int64(writers * writesEach))
        for writer in 0..<writers {
            #expect(try store.get(id: "w\(writer)").body == body(writesEach - 1))
        }
    }
}
