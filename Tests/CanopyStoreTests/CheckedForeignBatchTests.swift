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
}
