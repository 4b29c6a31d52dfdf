import CanopyCore
import Foundation
import Testing
@testable import CanopyStore

/// Conflicts an import keeps as they came (`ImportConflicts.keep`, the default with `couchDB`)
/// under a policy that would settle them: how long they stay kept, and what ends that.
@Suite("conflicts an import keeps as they came")
struct KeptImportedConflictsTests {
    static let root = String(repeating: "0", count: 32)
    static let winner = RevisionID("2-" + String(repeating: "b", count: 32))!
    static let loser = RevisionID("2-" + String(repeating: "a", count: 32))!

    /// A CouchDB dump of `id` with two live leaves under one root: CouchDB's winner and its conflict.
    static func dump(_ ids: [String]) -> [UInt8] {
        let docs = ids.flatMap { id in
            [(winner, "winner"), (loser, "loser")].map { rev, side in
                #"{"_id":"\#(id)","_rev":"\#(rev)","_revisions":{"start":2,"ids":["\#(rev.description.dropFirst(2))","\#(root)"]},"side":"\#(side)"}"#
            }
        }
        return Array((#"{"new_edits":false,"docs":["# + docs.joined(separator: ",") + "]}").utf8)
    }

    static func keptRows(_ path: String) throws -> Int64? {
        try Database(path: path).scalarInt("SELECT count(*) FROM kept_imported_conflicts")
    }

    @Test("under automatic a couchDB import keeps its conflicts; reopening and the retry pass leave them; a local edit of a leaf keeps them; resolving, or a peer's revision the policy then settles, ends them")
    func keptUntilResolvedOrChanged() throws {
        let test = try TestStore()   // automatic
        let results = try test.store.importBulkDocs(Self.dump(["a", "b", "c"]), couchDB: true)
        #expect(results.map(\.resolution) == [.kept, .kept, .kept])
        #expect(results.first?.conflict?.rule == "import" && results.first?.conflict?.strategy == .manual)
        #expect(try test.store.get(id: "a", options: .conflicts).conflicts == [Self.loser])
        #expect(try test.store.retryConflictResolution().isEmpty)
        var store = try test.reopen()   // retries conflicts on open
        #expect(try store.conflictedDocumentIDs() == ["a", "b", "c"])

        // A local edit of one leaf is no decision: the conflict stays kept.
        try store.put(id: "a", body: .object(["side": .string("edited")]), replacing: Self.winner)
        store = try test.reopen()
        #expect(try store.conflictedDocumentIDs() == ["a", "b", "c"])

        // Resolved by hand: over, its row gone.
        try store.resolveConflicts(id: "b", resolver: ClosureResolver { _ in .keep(Self.loser) })
        #expect(try store.get(id: "b").body == .object(["side": .string("loser")]))
        // A peer's revision on one leaf: the policy decides (automatic settles it at once).
        try store.bulkInsertForeign([try foreign("c", parentPath: [Self.loser], body: .object(["side": .string("peer")]))])
        #expect(try store.conflictedDocumentIDs() == ["a"])
        #expect(try Self.keptRows(test.path) == 1)
    }

    @Test("conflicts: .settle makes a couchDB import settle by the policy; conflicts: .keep keeps a plain import's")
    func explicitChoice() throws {
        let store = try TestStore().store
        let settled = try store.importBulkDocs(Self.dump(["s"]), couchDB: true, conflicts: .settle)
        #expect(settled.map(\.resolution) == [.resolved])
        #expect(try store.get(id: "s", options: .conflicts).conflicts == [])
        let kept = try store.importBulkDocs(Self.dump(["k"]), conflicts: .keep)
        #expect(kept.map(\.resolution) == [.kept])
        #expect(try store.conflictedDocumentIDs() == ["k"])
    }
}
