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

    @Test("a change's current revision is the document's when a closing tombstone sorts before an open deletion")
    func currentSkipsClosingTombstone() throws {
        let store = try TestStore(.init(conflictPolicy: .automatic)).store
        let first = try store.put(id: "d", body: body(1), replacing: nil)
        try store.put(id: "d", body: body(2), replacing: first)
        // Deletes win: the live leaf gets a closing tombstone one generation above the deletion.
        let remote = try foreign("d", parentPath: [first], kind: .deleted, body: .emptyObject)
        try store.bulkInsertForeign([remote])
        let change = try #require(try store.changes(since: 0).first)
        #expect(change.leaves.first?.kind == .closed, "the tombstone sorts first")
        #expect(change.current == remote.path.leaf)
        #expect(change.current == (try store.revisionTree(id: "d")?.current?.id))
        #expect(change.deleted)
    }

    @Test("a leaf list the store did not write is reported as damage and passed over, not misread", arguments: [
        "x'00'", "x'00000000000102030405060708090a0b0c0d0e0f00'", "x'00000001000102030405060708090a0b0c0d0e0f09'",
    ])
    func corruptLeafList(leaves: String) throws {
        let test = try TestStore()
        try test.store.put(id: "d", body: body(1), replacing: nil)
        try test.store.put(id: "e", body: body(2), replacing: nil)
        try Database(path: test.path).execute("UPDATE documents SET leaves = \(leaves) WHERE doc_id = 'd'")
        let page = try test.store.changesPage(since: 0)
        #expect(page.changes.map(\.documentID) == ["e"])
        #expect(page.damaged.map(\.documentID) == ["d"] && page.damaged.allSatisfy { $0.reason.contains("leaf list") })
        #expect(page.lastSequence == 2 && page.reachedEnd)
        #expect(test.store.damagedCount == 1)
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

@Suite("Replication scenarios")
struct ReplicationScenarioTests {
    /// Sends everything `source` has that `target` lacks, as replication does.
    private func replicate(from source: DocumentStore, to target: DocumentStore) throws {
        let changes = try source.changes(since: 0)
        let offered = Dictionary(uniqueKeysWithValues: changes.map { ($0.documentID, $0.leaves.map(\.revision)) })
        let diff = try target.revsDiff(offered)
        let requests = diff.map { RevisionRequest(documentID: $0.documentID, revisions: $0.missing, knownAncestors: $0.possibleAncestors) }
        try target.bulkInsertForeign(try source.revisionsToSend(requests))
    }

    @Test("the same edit made on two stores replicates without a conflict")
    func identicalEditsDoNotConflict() throws {
        let a = try TestStore().store
        let b = try TestStore().store
        let base = try a.put(id: "doc", body: body(1), replacing: nil)
        try replicate(from: a, to: b)
        try a.put(id: "doc", body: body(2, "same"), replacing: base)
        try b.put(id: "doc", body: body(2, "same"), replacing: base)
        try replicate(from: a, to: b)
        try replicate(from: b, to: a)
        #expect(try a.conflictedCount == 0 && b.conflictedCount == 0)
        #expect(try a.get(id: "doc").revision == b.get(id: "doc").revision)
    }

    @Test("a history that extends a stemmed tree merges onto the kept revisions")
    func extendsStemmedTree() throws {
        let source = try TestStore().store
        let target = try TestStore(.init(revsLimit: 3)).store
        var rev = try source.put(id: "doc", body: body(0), replacing: nil)
        for n in 1..<10 { rev = try source.put(id: "doc", body: body(n), replacing: rev) }
        try replicate(from: source, to: target)
        #expect(try target.revisionTree(id: "doc")?.count == 3)
        rev = try source.put(id: "doc", body: body(10), replacing: rev)
        try replicate(from: source, to: target)
        let tree = try #require(try target.revisionTree(id: "doc"))
        #expect(tree.current?.id == rev)
        #expect(!tree.isConflicted && tree.count == 3)
        #expect(try target.get(id: "doc").body == body(10))
    }

    @Test("a deletion and a later re-creation replicate to a peer that had the document")
    func deletionThenRecreation() throws {
        let a = try TestStore().store
        let b = try TestStore().store
        let first = try a.put(id: "doc", body: body(1), replacing: nil)
        try replicate(from: a, to: b)
        try a.delete(id: "doc", rev: first)
        try replicate(from: a, to: b)
        #expect(try b.get(id: "doc").isDeleted)
        let revived = try a.put(id: "doc", body: body(3), replacing: nil)
        try replicate(from: a, to: b)
        #expect(try b.get(id: "doc").revision == revived)
        #expect(try !b.get(id: "doc").isDeleted)
        #expect(try b.conflictedCount == 0)
    }

    @Test("two stores with concurrent edits converge to the same current revision under the automatic policy")
    func concurrentEditsConverge() throws {
        let a = try TestStore().store
        let b = try TestStore().store
        let base = try a.put(id: "doc", body: body(0), replacing: nil)
        try replicate(from: a, to: b)
        var revA = try a.put(id: "doc", body: body(1, "a"), replacing: base)
        revA = try a.put(id: "doc", body: body(2, "a"), replacing: revA)
        try b.put(id: "doc", body: body(1, "b"), replacing: base)
        try replicate(from: a, to: b)
        try replicate(from: b, to: a)
        try replicate(from: a, to: b)
        #expect(try a.get(id: "doc").revision == b.get(id: "doc").revision)
        #expect(try a.get(id: "doc").body == body(2, "a"))
        #expect(try a.conflictedCount == 0 && b.conflictedCount == 0)
        #expect(try a.revisionTree(id: "doc")?.leaves == b.revisionTree(id: "doc")?.leaves)
    }
}
