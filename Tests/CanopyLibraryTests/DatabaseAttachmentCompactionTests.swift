import Canopy
import CanopyStore
import Foundation
import Synchronization
import Testing

@Suite("Database: compacting attachments")
struct DatabaseAttachmentCompactionTests {
    @Test("compactAttachments removes content only once no stored revision body names it; what is still attached stays readable, and removed content can be attached again")
    func compactAttachments() async throws {
        let test = try TestDatabase()
        let base = try await test.db.save(json: .object([:]), id: "doc")
        let (kept, keptBytes) = try contentFile(test.directory, "kept.bin", count: 70_000, seed: 20)
        let (dropped, droppedBytes) = try contentFile(test.directory, "dropped.bin", count: 50_000, seed: 21)
        let second = try await test.db.attach("kept", to: "doc", contentsOf: kept, contentType: "application/octet-stream", replacing: base)
        let third = try await test.db.attach("dropped", to: "doc", contentsOf: dropped, contentType: "application/octet-stream", replacing: second)
        let droppedFile = try await test.db.attachmentFile("dropped", of: "doc")
        let fourth = try await test.db.detach("dropped", from: "doc", replacing: third)

        #expect(try await test.db.compactAttachments() == AttachmentGarbageReport(namedFiles: 2), "the detaching revision's parents still hold their bodies")
        try test.db.store.compact()
        #expect(try await test.db.compactAttachments() == AttachmentGarbageReport(removedFiles: 1, freedBytes: Int64(droppedBytes.count), namedFiles: 1))
        #expect(!FileManager.default.fileExists(atPath: droppedFile.path))
        #expect(try await collect(test.db.attachmentContents("kept", of: "doc")) == keptBytes)

        try await test.db.attach("dropped", to: "doc", contentsOf: dropped, contentType: "application/octet-stream", replacing: fourth)
        #expect(try await collect(test.db.attachmentContents("dropped", of: "doc")) == droppedBytes)
    }

    @Test("Node.compact drops old bodies, then removes content no revision of any of the node's databases names", .timeLimit(.minutes(5)))
    func nodeCompact() async throws {
        let directory = TemporaryDirectory()
        let node = try Node(directory: directory.path("node"))
        let archive = try await node.createDatabase("archive")
        let (file, bytes) = try contentFile(directory, "scan.bin", count: 60_000, seed: 30)
        let base = try await node.database.save(json: .object([:]), id: "doc")
        let attached = try await node.database.attach("scan", to: "doc", contentsOf: file, contentType: "image/png", replacing: base)
        let archivedBase = try await archive.save(json: .object([:]), id: "old")
        let archived = try await archive.attach("scan", to: "old", contentsOf: file, contentType: "image/png", replacing: archivedBase)
        try await node.database.detach("scan", from: "doc", replacing: attached)

        let kept = try await node.compact()
        #expect(kept.databases.sorted() == ["archive", "default"] && kept.bodiesDropped >= 1, "\(kept)")
        #expect(kept.attachmentsRemoved == 0 && kept.attachmentsKept == 1, "archive still names it: \(kept)")
        try await archive.detach("scan", from: "old", replacing: archived)
        let removed = try await node.compact(database: "archive")
        #expect(removed.databases == ["archive"], "\(removed)")
        #expect(removed.attachmentsRemoved == 1 && removed.attachmentBytesFreed == Int64(bytes.count), "\(removed)")
        await node.stop()
    }

    @Test("attach holds its content pinned until its revision commits: a compaction run inside the write keeps it")
    func attachPinsUntilCommit() throws {
        let test = try TestDatabase()
        let first = try test.db.save(json: .object(["v": .int(1)]), id: "doc")
        let current = try test.db.save(json: .object(["v": .int(2)]), id: "doc", replacing: first)
        let (file, _) = try contentFile(test.directory, "x.bin", count: 4000, seed: 22)
        let during = Mutex<AttachmentGarbageReport?>(nil)
        let db = test.db
        let revision = try db.attach(
            "x", to: "doc", contentsOf: file, contentType: "application/octet-stream", replacing: first,
            concurrency: .handler { conflict in
                let report = try db.compactAttachments()
                during.withLock { $0 = report }
                return conflict.current.body
            })
        #expect(during.withLock { $0 } == AttachmentGarbageReport(pinnedFiles: 1), "stored, not yet named, pinned")
        #expect(revision.generation == current.generation + 1)
        #expect(FileManager.default.fileExists(atPath: try db.attachmentFile("x", of: "doc").path))
        #expect(try db.compactAttachments() == AttachmentGarbageReport(namedFiles: 1))
    }

    @Test("databases sharing one attachment directory are compacted together: alone each refuses, together what either names is kept")
    func sharedDirectory() throws {
        let directory = TemporaryDirectory()
        let configuration = DocumentStore.Configuration(attachmentsDirectory: directory.path("attachments"))
        let one = Database(store: try DocumentStore(path: directory.path("one.sqlite"), configuration: configuration))
        let two = Database(store: try DocumentStore(path: directory.path("two.sqlite"), configuration: configuration))
        let (a, _) = try contentFile(directory, "a", count: 3000, seed: 23)
        let (b, _) = try contentFile(directory, "b", count: 2000, seed: 24)
        try one.attach("a", to: "doc", contentsOf: a, contentType: "text/plain", replacing: try one.save(json: .object([:]), id: "doc"))
        let named = try two.attach("b", to: "doc", contentsOf: b, contentType: "text/plain", replacing: try two.save(json: .object([:]), id: "doc"))

        #expect(throws: DatabaseError.self) { try one.compactAttachments() }
        #expect(try Database.compactAttachments(of: [one, two]) == AttachmentGarbageReport(namedFiles: 2))
        try two.store.delete(id: "doc", rev: named)
        try two.store.compact()
        #expect(try Database.compactAttachments(of: [one, two]) == AttachmentGarbageReport(removedFiles: 1, freedBytes: 2000, namedFiles: 1))
        #expect(try one.attachments(of: "doc")?["a"].map { one.store.attachments.contains($0.digest) } == true)
    }
}
