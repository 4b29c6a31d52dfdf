import Canopy
import Foundation
import Testing

@Suite("Database: the changes feed as an AsyncSequence")
struct DatabaseChangesTests {
    @Test("the feed delivers the existing documents, then live changes, and ends when its task is cancelled")
    func existingThenLiveThenCancelled() async throws {
        let database = try TestDatabase()
        let db = database.db
        try await db.save(Note(title: "a", text: ""), id: "a")
        try await db.save(Note(title: "b", text: ""), id: "b")

        let (delivered, sink) = AsyncStream<String>.makeStream()
        let reader = Task {
            var seen: [String] = []
            for try await change in db.changes() {
                seen.append(change.documentID)
                sink.yield(change.documentID)
            }
            sink.finish()
            return seen
        }
        var received = delivered.makeAsyncIterator()
        #expect(await received.next() == "a")
        #expect(await received.next() == "b")
        // The reader is now waiting at the end of the feed (or about to): a commit wakes it.
        try await db.save(Note(title: "c", text: ""), id: "c")
        #expect(await received.next() == "c")
        reader.cancel()
        #expect(try await reader.value == ["a", "b", "c"])
        #expect(await received.next() == nil)
    }

    @Test("changes after `since` only; a document edited while the reader is busy comes once, at its latest change")
    func sinceAndCoalescing() async throws {
        let database = try TestDatabase()
        let db = database.db
        var revision = try await db.save(Note(title: "0", text: ""), id: "x")
        let start = db.lastSequence
        try await db.save(Note(title: "", text: ""), id: "y")

        var feed = db.changes(since: start).makeAsyncIterator()
        #expect(try await feed.next()?.documentID == "y")
        for edit in 1...5 {
            revision = try await db.save(Note(title: "\(edit)", text: ""), id: "x", replacing: revision)
        }
        try await db.delete(id: "y", revision: try #require(try db.document(id: "y")).revision)
        let x = try #require(try await feed.next())
        #expect(x.documentID == "x" && x.current == revision && !x.deleted)
        let y = try #require(try await feed.next())
        #expect(y.documentID == "y" && y.deleted)
        #expect(y.sequence == db.lastSequence)
    }

    @Test("more changes than one page are all delivered, in sequence order")
    func manyPages() async throws {
        let database = try TestDatabase()
        let db = database.db
        let ids = (0..<250).map { "doc-\($0)" }
        for id in ids { try await db.save(Note(title: id, text: ""), id: id) }
        var feed = db.changes().makeAsyncIterator()
        var seen: [Change] = []
        while seen.count < ids.count, let change = try await feed.next() { seen.append(change) }
        #expect(seen.map(\.documentID) == ids)
        #expect(seen.map(\.sequence) == seen.map(\.sequence).sorted())
    }
}
