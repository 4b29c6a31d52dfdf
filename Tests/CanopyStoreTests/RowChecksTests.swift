import CanopyCore
import Foundation
import Testing
@testable import CanopyStore

/// Damage that leaves a document's row well formed (SQLite's integrity check passes): the changes
/// feed leaves the row out and reports it, and `checkRows` names it by document.
@Suite("Row checks")
struct RowChecksTests {
    /// A store with documents `a`…`e`, and a raw connection to its file.
    private func store() throws -> (TestStore, Database) {
        let test = try TestStore()
        for (n, id) in ["a", "b", "c", "d", "e"].enumerated() { _ = try test.store.put(id: id, body: body(n), replacing: nil) }
        return (test, try Database(path: test.path))
    }

    /// Flips bit `bit` of byte `byte` of document `id`'s leaf list in the file.
    private func flipLeafBit(_ raw: Database, _ id: String, byte: Int, bit: Int) throws {
        var leaves = try raw.queryFirst("SELECT leaves FROM documents WHERE doc_id = ?", [.text(id)]) { $0.blob(0) ?? [] } ?? []
        leaves[byte] ^= UInt8(1 << bit)
        try raw.run("UPDATE documents SET leaves = ? WHERE doc_id = ?", .blob(leaves), .text(id))
    }

    @Test("a sound store has no damage to report, for every row it counts")
    func soundStore() throws {
        let (test, _) = try store()
        try test.store.delete(id: "e", rev: try test.store.get(id: "e").revision)
        let report = try test.store.checkRows()
        #expect(report.documents == 5 && report.damaged.isEmpty && report.strayRevisionRows == 0, "\(report)")
    }

    @Test("a flipped bit in a leaf's digest: the feed leaves the document out, the check names it", arguments: [4, 9, 19])
    func flippedLeafDigest(byte: Int) throws {
        let (test, raw) = try store()
        try flipLeafBit(raw, "c", byte: byte, bit: 3)
        let page = try test.store.changesPage(since: 0)
        #expect(page.changes.map(\.documentID) == ["a", "b", "d", "e"])
        #expect(page.damaged.map(\.documentID) == ["c"] && page.damaged[0].reason.contains("check value"), "\(page.damaged)")
        let report = try test.store.checkRows()
        #expect(report.damaged.map(\.documentID) == ["c"], "\(report)")
        #expect(test.store.damagedCount == 1)
    }

    @Test("a flipped deleted flag is found by the feed and the check")
    func flippedDeletedFlag() throws {
        let (test, raw) = try store()
        try raw.run("UPDATE documents SET deleted = 1 WHERE doc_id = 'b'")
        let page = try test.store.changesPage(since: 0)
        #expect(page.changes.map(\.documentID) == ["a", "c", "d", "e"])
        #expect(page.damaged.first?.reason.contains("deleted flag") == true, "\(page.damaged)")
        #expect(try test.store.checkRows().damaged.map(\.documentID) == ["b"])
    }

    @Test("an id changed in both the row and its index is found, and is never fed under the new id")
    func consistentIDChange() throws {
        let (test, raw) = try store()
        try raw.run("UPDATE documents SET doc_id = 'z' WHERE doc_id = 'd'")
        #expect(try raw.query("PRAGMA integrity_check") { $0.text(0) } == ["ok"])
        let page = try test.store.changesPage(since: 0)
        #expect(!page.changes.contains { $0.documentID == "z" })
        #expect(page.damaged.map(\.documentID) == ["z"])
        #expect(try test.store.checkRows().damaged.map(\.documentID) == ["z"])
    }

    @Test("a row whose leaf the revisions lost, a conflicted flag, a current revision and a body that disagree are each named")
    func rowAgainstRevisions() throws {
        let (test, raw) = try store()
        let e = try test.store.get(id: "e").revision
        let a = try test.store.get(id: "a").revision
        try test.store.put(id: "a", body: body(10), replacing: a)
        // The newest revision of `a` is lost from the revisions table; its row still lists it.
        try raw.run("DELETE FROM revisions WHERE generation = 2")
        try raw.run("UPDATE documents SET conflicted = 1 WHERE doc_id = 'b'")
        try raw.run("UPDATE documents SET current_generation = 7 WHERE doc_id = 'c'")
        try raw.run("UPDATE revisions SET body = ? WHERE body = ?", .blob(CanonicalJSON.encode(body(40))), .blob(CanonicalJSON.encode(body(4))))
        let report = try test.store.checkRows()
        let byDocument = Dictionary(grouping: report.damaged, by: \.documentID).mapValues { $0.map(\.reason) }
        #expect(byDocument.keys.sorted() == ["a", "b", "c", "e"], "\(report)")
        #expect(byDocument["a"]?.contains { $0.contains("lists the leaves") } == true)
        #expect(byDocument["b"]?.contains { $0.contains("conflicted flag") } == true)
        #expect(byDocument["c"]?.contains { $0.contains("as current") } == true)
        #expect(byDocument["e"]?.contains { $0.contains("no longer matches") } == true)
        #expect(report.damaged.first { $0.documentID == "e" }?.revision == e)
    }

    @Test("revision rows of a lost document row are counted")
    func strayRevisions() throws {
        let (test, raw) = try store()
        try raw.run("DELETE FROM documents WHERE doc_id = 'a'")
        let report = try test.store.checkRows()
        #expect(report.strayRevisionRows == 1 && report.documents == 4, "\(report)")
    }

    @Test("damage past the limit is counted as truncated, not listed")
    func limit() throws {
        let (test, raw) = try store()
        try raw.run("UPDATE documents SET deleted = 1")
        let report = try test.store.checkRows(problemsMax: 2)
        #expect(report.damaged.count == 2 && report.truncated)
        #expect(test.store.damagedCount == 5)
    }
}
