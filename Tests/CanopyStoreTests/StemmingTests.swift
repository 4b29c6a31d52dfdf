import CanopyCore
import Testing
@testable import CanopyStore

@Suite("Stemming and compaction")
struct StemmingTests {
    private func revisionRows(_ path: String) throws -> Int64 {
        try Database(path: path).scalarInt("SELECT count(*) FROM revisions") ?? -1
    }

    @Test("writes stem each document to revsLimit and delete the stemmed rows")
    func stemmingDeletesRows() throws {
        let test = try TestStore(.init(revsLimit: 4))
        var rev = try test.store.put(id: "doc", body: body(0), replacing: nil)
        var history = [rev]
        for n in 1..<20 {
            rev = try test.store.put(id: "doc", body: body(n), replacing: rev)
            history.insert(rev, at: 0)
        }
        #expect(try revisionRows(test.path) == 4)
        #expect(try test.store.get(id: "doc", options: .revisions).history == Array(history.prefix(4)))
        // A peer that had only the stemmed part still merges: the path starts a known chain.
        #expect(try test.store.revsDiff(["doc": [history[10]]]).first?.missing == [history[10]])
    }

    @Test("lowering revsLimit stems a tree at its next write")
    func loweringRevsLimit() throws {
        let test = try TestStore()
        var rev = try test.store.put(id: "doc", body: body(0), replacing: nil)
        for n in 1..<10 { rev = try test.store.put(id: "doc", body: body(n), replacing: rev) }
        #expect(try revisionRows(test.path) == 10)
        try test.store.setRevsLimit(3)
        try test.store.put(id: "doc", body: body(10), replacing: rev)
        #expect(try revisionRows(test.path) == 3)
    }

    @Test("stemming keeps the common ancestor of an open conflict")
    func stemmingKeepsConflictAncestor() throws {
        let store = try TestStore(.init(revsLimit: 2, conflictPolicy: .manual)).store
        let base = try store.put(id: "doc", body: body(0, "base"), replacing: nil)
        var local = try store.put(id: "doc", body: body(1, "local"), replacing: base)
        for n in 2..<6 { local = try store.put(id: "doc", body: body(n, "local"), replacing: local) }
        let remote = try foreign("doc", parentPath: [base], body: body(1, "remote"))
        try store.bulkInsertForeign([remote])
        let tree = try #require(try store.revisionTree(id: "doc"))
        #expect(tree.contains(base))
        #expect(tree.isConflicted)
    }

    @Test("compaction drops non-leaf bodies but keeps leaves and a conflict's common ancestor")
    func compaction() throws {
        let store = try TestStore(.init(conflictPolicy: .manual)).store
        let first = try store.put(id: "plain", body: body(1), replacing: nil)
        let second = try store.put(id: "plain", body: body(2), replacing: first)
        let base = try store.put(id: "conflicted", body: body(0, "base"), replacing: nil)
        let local1 = try store.put(id: "conflicted", body: body(1, "local"), replacing: base)
        try store.put(id: "conflicted", body: body(2, "local"), replacing: local1)
        try store.bulkInsertForeign([try foreign("conflicted", parentPath: [base], body: body(1, "remote"))])
        let dropped = try store.compact()
        #expect(dropped == 2)
        #expect(throws: StoreError.self) { try store.get(id: "plain", rev: first) }
        #expect(try store.get(id: "plain", rev: second).body == body(2))
        #expect(try store.get(id: "conflicted", rev: base).body == body(0, "base"))
        #expect(throws: StoreError.self) { try store.get(id: "conflicted", rev: local1) }
        #expect(try store.integrityCheck() == "ok")
    }
}
