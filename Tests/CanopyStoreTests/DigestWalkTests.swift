import CanopyCore
import Testing

@testable import CanopyStore

/// The digest tree walk (`Protocol/digests.md` §6) between two real stores: the asking side's
/// `DigestComparison` against the answers the other store's documents give, as the exchange
/// carries them, finds exactly the documents planted apart.
@Suite("the digest tree walk between two stores")
struct DigestWalkTests {
    /// Walks `asker` against `answerer` under `prefix`, the way a session does: root children
    /// from the kept buckets, everything else from the digest index. Returns the comparison and
    /// the round trips it took.
    static func walk(_ asker: DocumentStore, against answerer: DocumentStore, prefix: String = "", differencesMax: Int = 10_000)
        throws -> (DigestComparison, Int)
    {
        var comparison = DigestComparison(differencesMax: differencesMax)
        var rounds = 0
        while !comparison.toAsk.isEmpty {
            rounds += 1
            let nodes = comparison.nextNodes(64)
            let theirs = try answerer.digestDocuments(prefix: prefix, under: nodes)
            let ours = try asker.digestDocuments(prefix: prefix, under: nodes)
            for node in nodes {
                let answer: DigestNodeAnswer
                if node == .root && prefix.isEmpty && answerer.digestRootChildren.reduce(0, { $0 + $1.documents }) > 64 {
                    answer = .children(answerer.digestRootChildren)
                } else {
                    answer = DigestTree.answer(for: node, from: theirs)
                }
                comparison.receive(answer, for: node, localChildren: node == .root && prefix.isEmpty ? asker.digestRootChildren : nil, localDocuments: ours)
            }
        }
        return (comparison, rounds)
    }

    @Test("3,000 documents alike, then one missing on each side, one edited apart and one conflict: exactly those four, with each side's leaves")
    func plantedDifferences() throws {
        let shared = try (0..<3000).map { try foreign("doc-\($0)", body: body($0)) }
        let (first, second) = (try TestStore(.init(conflictPolicy: .manual)), try TestStore(.init(conflictPolicy: .manual)))
        _ = try first.store.bulkInsertForeign(shared)
        _ = try second.store.bulkInsertForeign(shared)
        var (same, rounds) = try Self.walk(first.store, against: second.store)
        #expect(same.differences.isEmpty && rounds == 1, "identical stores differ at the root only: \(same.differences)")

        try first.store.put(id: "only-here", body: body(1), replacing: nil)
        try second.store.put(id: "only-there", body: body(2), replacing: nil)
        let edit = try foreign("doc-7", parentPath: [shared[7].path.leaf], body: body(7, "edited"))
        _ = try second.store.bulkInsertForeign([edit])
        let branch = try foreign("doc-9", parentPath: [shared[9].path.leaf], body: body(9, "branch"))
        _ = try first.store.bulkInsertForeign([branch])
        let other = try foreign("doc-9", parentPath: [shared[9].path.leaf], body: body(9, "other branch"))
        _ = try first.store.bulkInsertForeign([other])

        (same, rounds) = try Self.walk(first.store, against: second.store)
        let found = same.sortedDifferences
        #expect(found.map(\.id) == ["doc-7", "doc-9", "only-here", "only-there"])
        #expect(found[0].local == [DigestLeaf(revision: shared[7].path.leaf, deleted: false)])
        #expect(found[0].remote == [DigestLeaf(revision: edit.path.leaf, deleted: false)])
        #expect(found[1].local?.count == 2 && found[1].remote == [DigestLeaf(revision: shared[9].path.leaf, deleted: false)])
        #expect(found[2].remote == nil && found[2].local?.count == 1)
        #expect(found[3].local == nil && found[3].remote?.count == 1)
        #expect(rounds <= 4 && !same.truncated, "rounds \(rounds)")
    }

    @Test("under a prefix only the documents with it are compared; a limit stops the walk and says so")
    func prefixAndLimit() throws {
        let (first, second) = (try TestStore(), try TestStore())
        _ = try first.store.putBatch((0..<300).map { LocalWrite(documentID: "a:\($0)", body: body($0), replacing: nil) })
        _ = try first.store.putBatch((0..<300).map { LocalWrite(documentID: "b:\($0)", body: body($0), replacing: nil) })
        let (under, _) = try Self.walk(first.store, against: second.store, prefix: "a:")
        #expect(under.differences.count == 300 && under.differences.allSatisfy { $0.id.hasPrefix("a:") && $0.remote == nil })
        let (limited, _) = try Self.walk(first.store, against: second.store, differencesMax: 10)
        #expect(limited.differences.count == 10 && limited.truncated)
        let (reversed, _) = try Self.walk(second.store, against: first.store, differencesMax: 10)
        #expect(reversed.differences.count == 10 && reversed.truncated && reversed.differences.allSatisfy { $0.local == nil })
    }

    @Test("a file from before the digest index gets it filled from its rows when it is opened")
    func filledByTheSchemaStep() throws {
        let test = try TestStore()
        _ = try test.store.putBatch((0..<50).map { LocalWrite(documentID: "d\($0)", body: body($0), replacing: nil) })
        let db = try Database(path: test.path)
        try db.execute("DROP TABLE digest_index; PRAGMA user_version = 9")
        let reopened = try test.reopen()
        #expect(try reopened.digestDocuments(prefix: "", under: [.root]).count == 50)
        #expect(try reopened.checkRows().digestIndexDisagreements == 0)
    }

    @Test("the full check counts a document missing from the digest index and a row with a wrong hash")
    func checkFindsDamage() throws {
        let test = try TestStore()
        _ = try test.store.putBatch((0..<20).map { LocalWrite(documentID: "d\($0)", body: body($0), replacing: nil) })
        let db = try Database(path: test.path)
        try db.execute("DELETE FROM digest_index WHERE doc_id = 'd3'; UPDATE digest_index SET id_hash = id_hash + 1 WHERE doc_id = 'd4'")
        #expect(try test.store.checkRows().digestIndexDisagreements == 3)
    }
}
