import CanopyCore
import Testing
@testable import CanopyStore

@Suite("Changes feed and replication queries")
struct ChangesTests {
    @Test("changes lists each document once, at its latest sequence, in sequence order")
    func changesOrder() throws {
        let store = try TestStore().store
        let a1 = try store.put(id: "a", body: body(1), replacing: nil)
        try store.put(id: "b", body: body(1), replacing: nil)
        let a2 = try store.put(id: "a", body: body(2), replacing: a1)
        try store.put(id: "c", body: body(1), replacing: nil)
        let changes = try store.changes(since: 0)
        #expect(changes.map(\.documentID) == ["b", "a", "c"])
        #expect(changes.map(\.sequence) == [2, 3, 4])
        #expect(changes[1].current == a2)
        #expect(try store.changes(since: 2).map(\.documentID) == ["a", "c"])
        #expect(try store.changes(since: 0, limit: 1).map(\.documentID) == ["b"])
        #expect(store.lastSequence == 4)
    }

    @Test("changes reports deletions and every leaf with its kind, current first")
    func changesLeaves() throws {
        let store = try TestStore(.init(conflictPolicy: .manual)).store
        let first = try store.put(id: "d", body: body(1), replacing: nil)
        let local = try store.put(id: "d", body: body(2), replacing: first)
        let remote = try foreign("d", parentPath: [first], kind: .deleted, body: .emptyObject)
        try store.bulkInsertForeign([remote])
        let change = try #require(try store.changes(since: 0).first)
        #expect(change.leaves == [ChangeLeaf(revision: local, kind: .live), ChangeLeaf(revision: remote.path.leaf, kind: .deleted)])
        #expect(!change.deleted)
        let tombstone = try store.delete(id: "x", rev: try store.put(id: "x", body: body(1), replacing: nil))
        let last = try #require(try store.changes(since: 0).last)
        #expect(last.deleted && last.current == tombstone)
    }

    @Test("local documents never appear in the changes feed")
    func localDocumentsDoNotReplicate() throws {
        let store = try TestStore().store
        try store.localPut("checkpoint", body: .object(["seq": .int(5)]))
        #expect(try store.changes(since: 0).isEmpty)
        #expect(store.lastSequence == 0)
        #expect(try store.localGet("checkpoint") == .object(["seq": .int(5)]))
        try store.localPut("checkpoint", body: .object(["seq": .int(6)]))
        #expect(try store.localGet("checkpoint") == .object(["seq": .int(6)]))
        #expect(try store.localDelete("checkpoint"))
        #expect(try store.localGet("checkpoint") == nil)
        #expect(try !store.localDelete("checkpoint"))
        #expect(throws: StoreError.self) { try store.localPut("x", body: .array([])) }
        #expect(throws: StoreError.self) { try store.localPut("", body: .emptyObject) }
    }

    @Test("revsDiff names the missing revisions and the lower-generation leaves as possible ancestors")
    func revsDiff() throws {
        let store = try TestStore().store
        let revisions = chain(4)
        let first = try store.put(id: "a", body: revisions[3].body, replacing: nil)
        let second = try store.put(id: "a", body: revisions[2].body, replacing: first)
        #expect(second == revisions[2].id)
        let unknownDoc = chain(1, seed: "u")[0].id
        let diff = try store.revsDiff([
            "a": [revisions[0].id, revisions[1].id, second],
            "b": [unknownDoc],
            "c": [],
        ])
        #expect(diff.map(\.documentID) == ["a", "b"])
        #expect(diff[0].missing == [revisions[1].id, revisions[0].id])
        #expect(diff[0].possibleAncestors == [second])
        #expect(diff[1].missing == [unknownDoc] && diff[1].possibleAncestors == [])
        #expect(try store.revsDiff(["a": [first, second]]).isEmpty)
    }

    @Test("revisionsToSend stops each history at the first revision the peer has and feeds a peer's store")
    func revisionsToSendRoundTrip() throws {
        let source = try TestStore().store
        var rev = try source.put(id: "doc", body: body(0), replacing: nil)
        var history = [rev]
        for n in 1..<6 {
            rev = try source.put(id: "doc", body: body(n), replacing: rev)
            history.insert(rev, at: 0)
        }
        let known = history[3]
        let sent = try source.revisionsToSend([RevisionRequest(documentID: "doc", revisions: [rev], knownAncestors: [known])])
        #expect(sent.count == 1)
        #expect(sent[0].path.leaf == rev)
        #expect(sent[0].path.ancestors == Array(history[1...3]))
        let full = try source.revisionsToSend([RevisionRequest(documentID: "doc", revisions: [rev], knownAncestors: [])])
        let target = try TestStore().store
        let results = try target.bulkInsertForeign(full)
        #expect(results[0].added.count == 6)
        #expect(try target.get(id: "doc", options: .revisions).history == history)
        #expect(try target.get(id: "doc").body == body(5))
        #expect(throws: StoreError.self) {
            try source.revisionsToSend([RevisionRequest(documentID: "nope", revisions: [rev], knownAncestors: [])])
        }
    }

    @Test("revisionsToSend caps a history at revsLimit revisions")
    func revisionsToSendCapped() throws {
        let source = try TestStore(.init(revsLimit: 3)).store
        var rev = try source.put(id: "doc", body: body(0), replacing: nil)
        for n in 1..<10 { rev = try source.put(id: "doc", body: body(n), replacing: rev) }
        let sent = try source.revisionsToSend([RevisionRequest(documentID: "doc", revisions: [rev], knownAncestors: [])])
        #expect(sent[0].path.revisions.count == 3)
    }
}
