import Canopy
import Dispatch
import Foundation
import Synchronization
import Testing

/// The awaited calls run on the database's own queue, not on a thread of the cooperative pool: a
/// task awaiting a slow write leaves the pool's threads to other tasks.
@Suite("Database: awaited calls")
struct DatabaseAsyncTests {
    /// Marks the queue code runs on: the database's, or a caller's.
    static let queueName = DispatchSpecificKey<String>()

    @Test("an awaited write runs on the database's queue; a synchronous one on its caller's thread")
    func writesRunOffThePool() async throws {
        let db = try TestDatabase().db
        db.queue.setSpecific(key: Self.queueName, value: "canopy.database")
        let first = try await db.save(json: .object(["n": .int(0)]), id: "doc")
        try await db.save(json: .object(["n": .int(1)]), id: "doc", replacing: first)
        // A write naming the stale `first` runs its handler inside the write: it says where.
        let labels = Mutex<[String]>([])
        let noting = WriteConcurrency.handler { _ in
            labels.withLock { $0.append(DispatchQueue.getSpecific(key: Self.queueName) ?? "a thread of the cooperative pool") }
            return .object(["n": .int(2)])
        }
        let rev = try await db.save(json: .object(["n": .int(9)]), id: "doc", replacing: first, concurrency: noting)
        #expect(labels.withLock { $0 } == ["canopy.database"])
        #expect(try await db.document(id: "doc")?.revision == rev)
        // From synchronous code the same call runs where it is called.
        let save: () throws -> RevisionID = {
            try db.save(json: .object(["n": .int(3)]), id: "doc", replacing: first, concurrency: noting)
        }
        let onCaller = DispatchQueue(label: "test.caller")
        onCaller.setSpecific(key: Self.queueName, value: "test.caller")
        _ = try onCaller.sync(execute: save)
        #expect(labels.withLock { $0 } == ["canopy.database", "test.caller"])
    }

    /// Runs `call` while the database's queue is held: it must still be waiting after a while
    /// (it runs on that queue, not on the task's thread), and finish once the queue is let go.
    static func waitsForTheQueue<T: Sendable>(
        _ db: Database, _ what: String, _ call: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let gate = DispatchSemaphore(value: 0)
        db.queue.async { gate.wait() }
        let finished = Mutex(false)
        let task = Task {
            let value = try await call()
            finished.withLock { $0 = true }
            return value
        }
        try await Task.sleep(for: .milliseconds(30))
        #expect(!finished.withLock { $0 }, "\(what) ran while the database's queue was held")
        gate.signal()
        return try await task.value
    }

    @Test("every awaited call that reads or writes the file waits for the database's queue")
    func everyCallRunsOnTheQueue() async throws {
        let test = try TestDatabase(.init(conflictResolution: .manual))
        let db = test.db
        let (file, bytes) = try contentFile(test.directory, "content.bin", count: 3000, seed: 7)
        let base = try await db.save(json: .object(["n": .int(0)]), id: "doc")
        try makeConflict(db, "task", base: .object(["v": .int(0)]), local: .object(["v": .int(1)]), remote: .object(["v": .int(2)]))

        #expect(try await Self.waitsForTheQueue(db, "conflictedDocumentIDs") { try await db.conflictedDocumentIDs() } == ["task"])
        let kept = try await Self.waitsForTheQueue(db, "resolveConflicts") {
            try await db.resolveConflicts(id: "task", resolver: BuiltInResolver.localWins)
        }
        #expect(try await db.document(id: "task")?.revision == kept)
        let attached = try await Self.waitsForTheQueue(db, "attach") {
            try await db.attach("a", to: "doc", contentsOf: file, contentType: "application/octet-stream", replacing: base)
        }
        #expect(try await Self.waitsForTheQueue(db, "attachments(of:)") { try await db.attachments(of: "doc") }?["a"]?.length == 3000)
        let path = try await Self.waitsForTheQueue(db, "attachmentFile") { try await db.attachmentFile("a", of: "doc") }
        #expect(try Data(contentsOf: path) == Data(bytes))
        let parts = try await Self.waitsForTheQueue(db, "attachmentContents") { try await db.attachmentContents("a", of: "doc") }
        #expect(try await collect(parts) == bytes)
        let detached = try await Self.waitsForTheQueue(db, "detach") { try await db.detach("a", from: "doc", replacing: attached) }
        #expect(try await Self.waitsForTheQueue(db, "compact") { try await db.compact() } >= 1)
        #expect(try await Self.waitsForTheQueue(db, "compactAttachments") { try await db.compactAttachments() }.removedFiles == 1)

        try await Self.waitsForTheQueue(db, "saveLocal") { try await db.saveLocal(json: .object(["theme": .string("dark")]), id: "settings") }
        #expect(try await Self.waitsForTheQueue(db, "localDocument") { try await db.localDocument(id: "settings") } == .object(["theme": .string("dark")]))
        #expect(try await Self.waitsForTheQueue(db, "deleteLocal") { try await db.deleteLocal(id: "settings") })
        #expect(try await db.localDocument(id: "settings") == nil)

        let batch = try await Self.waitsForTheQueue(db, "saveBatch") {
            try await db.saveBatch([DocumentWrite(documentID: "b1", body: .object(["n": .int(1)])), .deletion(of: "doc", revision: detached)])
        }
        #expect(batch.count == 2)
        #expect(try await db.document(id: "doc") == nil)
        let bulk = try await Self.waitsForTheQueue(db, "saveBulk") {
            try await db.saveBulk([DocumentWrite(documentID: "b2", body: .object(["n": .int(2)])), DocumentWrite(documentID: "b1", body: .object(["n": .int(3)]))])
        }
        #expect(bulk.count == 2 && bulk[1] == .conflict(current: batch[0]))
        try await db.save(Note(title: "a", text: ""), id: "note")
        let note = try await Self.waitsForTheQueue(db, "save(conflictHandler:)") {
            try await db.save(Note(title: "x", text: ""), id: "note", replacing: nil) { proposed, current in
                Note(title: proposed.title + (current?.title ?? ""), text: "")
            }
        }
        #expect(try await db.document(id: "note", as: Note.self)?.title == "xa")
        #expect(try await db.document(id: "note")?.revision == note)
        let copyPath = test.directory.path("copy.sqlite")
        let report = try await Self.waitsForTheQueue(db, "backup") { try await db.backup(to: copyPath) }
        #expect(report.documents == 4)
        let copy = try Database(path: copyPath)
        #expect(try await copy.document(id: "b1")?.revision == batch[0])
        // The changes feed reads its pages on the queue too.
        let first = try await Self.waitsForTheQueue(db, "the changes feed") { () async throws -> String? in
            var changes = db.changes(since: 0).makeAsyncIterator()
            return try await changes.next()?.documentID
        }
        #expect(first == "task")
    }

    @Test("calls waiting for the database's queue hold no thread of the cooperative pool")
    func waitingCallsLeaveThePoolFree() async throws {
        let db = try TestDatabase().db
        try await db.saveLocal(json: .object(["n": .int(1)]), id: "local")
        let gate = DispatchSemaphore(value: 0)
        db.queue.async { gate.wait() }
        // More waiting calls than the pool has threads (one per core).
        let waiting = (0..<(2 * ProcessInfo.processInfo.activeProcessorCount + 2)).map { _ in
            Task.detached { try await db.localDocument(id: "local") }
        }
        // A task that needs a thread of the pool still runs while every call waits.
        #expect(await Task.detached { 6 * 7 }.value == 42)
        gate.signal()
        for call in waiting { #expect(try await call.value == .object(["n": .int(1)])) }
    }
}
