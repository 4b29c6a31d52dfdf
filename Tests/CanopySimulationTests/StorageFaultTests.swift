import CanopyCore
import CanopyStore
import Foundation
import Testing

@testable import CanopySimulation

/// The storage faults the simulator injects, on one store: a commit that fails rolls back and
/// leaves the store usable; a commit the process dies in leaves a WAL whose last frame is torn,
/// and SQLite recovers the file to the commit before it.
@Suite("Storage faults")
struct StorageFaultTests {
    /// A store in a fresh directory with `faults` as its injector.
    final class Fixture: @unchecked Sendable {
        let directory: URL
        let path: String
        var now = 0.0
        let faults: StorageFaults
        var died: [(CrashImage, Double)] = []
        let store: DocumentStore

        init() throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("canopy-storage-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            path = directory.appendingPathComponent("n0.sqlite").path
            var clock: () -> Double = { 0 }
            faults = StorageFaults(clock: { clock() })
            let database = UUID(uuid: (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16))
            store = try DocumentStore(path: path, configuration: .init(databaseID: database, faultInjector: faults))
            clock = { [unowned self] in self.now }
            faults.path = { [path] in path }
            faults.died = { [unowned self] image, seconds in self.died.append((image, seconds)) }
        }

        deinit {
            try? FileManager.default.removeItem(at: directory)
        }

        /// Opens the files of `image` under a new name, as the simulator's restart does.
        func recover(_ image: CrashImage) throws -> DocumentStore {
            let copy = directory.appendingPathComponent("n0.1.sqlite").path
            try image.write(to: copy)
            return try DocumentStore(path: copy)
        }
    }

    static func body(_ n: Int) -> JSONValue { .object(["n": .int(Int64(n))]) }

    @Test("a new file takes the configured database id; an existing file keeps its own")
    func injectedDatabaseID() throws {
        let fixture = try Fixture()
        #expect(fixture.store.databaseIDBytes == Array(1...16))
        let other = UUID(uuid: (9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9))
        let reopened = try DocumentStore(path: fixture.path, configuration: .init(databaseID: other))
        #expect(reopened.databaseIDBytes == Array(1...16))
    }

    @Test("a commit that fails with an I/O error rolls back, and the next one succeeds")
    func ioError() throws {
        let fixture = try Fixture()
        try fixture.store.put(id: "a", body: Self.body(1), replacing: nil)
        fixture.faults.failNextCommit = true
        #expect {
            try fixture.store.put(id: "b", body: Self.body(2), replacing: nil)
        } throws: { error in
            guard case StoreError.sqlite(let sqlite) = error else { return false }
            return sqlite.code == StorageFaults.ioError
        }
        #expect(try fixture.store.documentCount == 1)
        let lastSequence = fixture.store.lastSequence
        try fixture.store.put(id: "b", body: Self.body(3), replacing: nil)
        #expect(fixture.store.lastSequence == lastSequence + 1)
        #expect(try fixture.store.get(id: "b").body == Self.body(3))
    }

    @Test("a full disk fails every commit until it has room again")
    func diskFull() throws {
        let fixture = try Fixture()
        fixture.faults.fullUntil = 5
        for n in 0..<3 {
            #expect {
                try fixture.store.put(id: "d\(n)", body: Self.body(n), replacing: nil)
            } throws: { error in
                guard case StoreError.sqlite(let sqlite) = error else { return false }
                return sqlite.code == StorageFaults.full
            }
        }
        #expect(try fixture.store.documentCount == 0)
        fixture.now = 5
        try fixture.store.put(id: "d0", body: Self.body(0), replacing: nil)
        #expect(try fixture.store.documentCount == 1)
    }

    @Test("a process that dies inside a commit leaves its commit frame torn; recovery drops that commit only",
          arguments: [1, 23, 24, 1000, 4119])
    func tornCommit(keep: Int) throws {
        let fixture = try Fixture()
        for n in 0..<20 { try fixture.store.put(id: "doc-\(n)", body: Self.body(n), replacing: nil) }
        let before = try CrashImage.capture(path: fixture.path)
        let lastBefore = try #require(before.wal.flatMap(WALFormat.lastValidCommit))
        fixture.faults.tearNextCommit = .init(keep: keep, downSeconds: 3)
        #expect(throws: StoreError.self) { try fixture.store.put(id: "lost", body: Self.body(99), replacing: nil) }
        // The commit happened in the live file; its caller was told it failed.
        #expect(try fixture.store.get(id: "lost").body == Self.body(99))
        let (image, seconds) = try #require(fixture.died.first)
        #expect(seconds == 3)
        #expect(image.database == before.database)
        // The WAL reaches into the commit's last frame and stops inside it.
        let live = try CrashImage.read(fixture.path + "-wal")
        let torn = try #require(image.wal)
        let commit = try #require(WALFormat.lastValidCommit(live))
        #expect(commit.frameOffset > lastBefore.frameOffset)
        #expect(torn.count == commit.frameOffset + 1 + keep % (commit.frameBytes - 1))
        #expect(WALFormat.lastValidCommit(torn) == lastBefore)
        let recovered = try fixture.recover(image)
        #expect(try recovered.integrityCheck() == "ok")
        #expect(try recovered.documentCount == 20)
        #expect(recovered.lastSequence == 20)
        #expect(throws: StoreError.self) { try recovered.get(id: "lost") }
        // The recovered file takes new commits, with the sequence the lost commit had.
        try recovered.put(id: "after", body: Self.body(100), replacing: nil)
        #expect(recovered.lastSequence == 21)
    }

    @Test("a commit that restarts the WAL after a full checkpoint tears too, and recovery keeps the checkpointed data")
    func tornCommitAfterWALRestart() throws {
        let fixture = try Fixture()
        for n in 0..<20 { try fixture.store.put(id: "doc-\(n)", body: Self.body(n), replacing: nil) }
        let checkpointer = try Database(path: fixture.path)
        try checkpointer.execute("PRAGMA wal_checkpoint(RESTART)")
        fixture.faults.tearNextCommit = .init(keep: 100, downSeconds: 1)
        #expect(throws: StoreError.self) { try fixture.store.put(id: "lost", body: Self.body(99), replacing: nil) }
        let (image, _) = try #require(fixture.died.first)
        let torn = try #require(image.wal)
        // The new WAL generation holds only the torn commit: nothing valid is left in it.
        #expect(WALFormat.lastValidCommit(torn) == nil)
        let recovered = try fixture.recover(image)
        #expect(try recovered.integrityCheck() == "ok")
        #expect(try recovered.documentCount == 20)
        #expect(throws: StoreError.self) { try recovered.get(id: "lost") }
    }

    @Test("a commit of a process that already died is refused")
    func deadProcessWritesNothing() throws {
        let fixture = try Fixture()
        final class Alive: @unchecked Sendable { var value = true }
        let alive = Alive()
        let path = fixture.directory.appendingPathComponent("other.sqlite").path
        let store = try DocumentStore(path: path, configuration: .init(
            faultInjector: StorageFaults.Lifetime(fixture.faults) { alive.value }))
        try store.put(id: "a", body: Self.body(1), replacing: nil)
        alive.value = false
        #expect(throws: StoreError.self) { try store.put(id: "b", body: Self.body(2), replacing: nil) }
        #expect(try store.documentCount == 1)
    }
}
