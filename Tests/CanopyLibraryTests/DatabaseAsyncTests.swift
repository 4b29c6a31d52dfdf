import Canopy
import Dispatch
import Foundation
import Synchronization
import Testing

/// The awaited document calls run on the database's own queue, not on a thread of the
/// cooperative pool: a task awaiting a slow write leaves the pool's threads to other tasks.
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
}
