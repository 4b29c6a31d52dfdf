import CanopyCore
import Testing
@testable import CanopyStore

@Suite("Foreign revisions checked before the write")
struct CheckedForeignBatchTests {
    @Test("a checked batch leaves out every revision of a document that failed, lists it once, and writes the rest")
    func rejectedDocumentsLeftOut() throws {
        let store = try TestStore().store
        let honest = try foreign("bad", body: body(1))
        let lie = ForeignRevision(documentID: "bad", path: honest.path, body: .canonical(CanonicalJSON.encode(body(2))))
        let notCanonical = ForeignRevision(documentID: "ugly", path: honest.path, body: .canonical(Array(#"{ "a":1}"#.utf8)))
        let batch = [try foreign("a", body: body(1)), honest, lie, notCanonical, try foreign("b", body: body(2))]
        let checked = try DocumentStore.checkForeign(batch)
        #expect(checked.rejected.map(\.documentID) == ["bad", "ugly"])
        #expect(checked.count == 2)
        let results = try store.bulkInsertForeign(checked: checked)
        #expect(results.map(\.documentID) == ["a", "b"])
        #expect(throws: StoreError.self) { try store.get(id: "bad") }
        #expect(try store.documentCount == 2)
    }

    @Test("a checked batch writes what the unchecked entry point writes")
    func sameAsUnchecked() throws {
        let batch = try (0..<100).map { try foreign("doc-\($0)", body: body($0)) }
        let direct = try TestStore()
        let early = try TestStore()
        let directResults = try direct.store.bulkInsertForeign(batch)
        let earlyResults = try early.store.bulkInsertForeign(checked: try DocumentStore.checkForeign(batch))
        #expect(directResults == earlyResults)
        #expect(try direct.store.changes(since: 0) == early.store.changes(since: 0))
    }

    @Test("a problem that names no document fails the whole check")
    func namelessProblemThrows() throws {
        let good = try foreign("good", body: body(1))
        let nameless = ForeignRevision(documentID: "", path: good.path, body: .value(body(1)))
        #expect(throws: StoreInputError.self) { try DocumentStore.checkForeign([good, nameless]) }
        let tooMany = [ForeignRevision](repeating: good, count: StoreLimits.foreignBatchCountMax + 1)
        #expect(throws: StoreInputError.self) { try DocumentStore.checkForeign(tooMany) }
    }

    @Test("checked batches written as one, with a local document in the same transaction: all of it or none")
    func concatenatedWithLocalDocument() throws {
        let store = try TestStore().store
        let first = try DocumentStore.checkForeign([try foreign("a", body: body(1)), try foreign("b", body: body(2))])
        let second = try DocumentStore.checkForeign([try foreign("c", body: body(3))])
        let joined = CheckedForeignBatch.concatenating([first, second])
        #expect(joined.count == 3)
        let checkpoint = try LocalDocument("checkpoint/x", body: .object(["sequence": .int(3)]))
        let results = try store.bulkInsertForeign(checked: joined, local: checkpoint)
        #expect(results.map(\.documentID) == ["a", "b", "c"])
        #expect(try store.localGet("checkpoint/x") == .object(["sequence": .int(3)]))

        // A history that contradicts the stored tree fails the write (only the merge can tell):
        // the local document the same call carried is not written either.
        let leaf = RevisionID(generation: 2, digestHigh: 2, digestLow: 2)
        let parents = [RevisionID(generation: 1, digestHigh: 1, digestLow: 1), RevisionID(generation: 1, digestHigh: 3, digestLow: 3)]
        let original = try DocumentStore.checkForeign(
            [ForeignRevision(documentID: "d", path: try RevisionPath(leaf: leaf, kind: .live, ancestors: [parents[0]]), body: .value(body(4)))],
            idCheck: .trusted)
        try store.bulkInsertForeign(checked: original)
        let contradicting = try DocumentStore.checkForeign(
            [ForeignRevision(documentID: "d", path: try RevisionPath(leaf: leaf, kind: .live, ancestors: [parents[1]]), body: .value(body(4)))],
            idCheck: .trusted)
        let later = try LocalDocument("checkpoint/x", body: .object(["sequence": .int(4)]))
        #expect(throws: StoreError.self) { try store.bulkInsertForeign(checked: contradicting, local: later) }
        #expect(try store.localGet("checkpoint/x") == .object(["sequence": .int(3)]))
    }

    @Test("a local document is checked before any write")
    func localDocumentChecked() throws {
        #expect(throws: StoreError.self) { try LocalDocument("", body: .object([:])) }
        #expect(throws: StoreError.self) { try LocalDocument("x", body: .array([])) }
    }
}
