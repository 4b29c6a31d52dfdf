import Canopy
import CanopyStore
import CanopyCore
import Foundation
import Testing

/// A file of `count` pseudo-random bytes (from `seed`) in `directory`.
func contentFile(_ directory: TemporaryDirectory, _ name: String, count: Int, seed: UInt64) throws -> (url: URL, bytes: [UInt8]) {
    var random = SplitMix64(seed: seed)
    let bytes = (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    let url = URL(fileURLWithPath: directory.path(name))
    try Data(bytes).write(to: url)
    return (url, bytes)
}

/// Every part of a stream, joined.
func collect(_ stream: AsyncThrowingStream<[UInt8], any Error>) async throws -> [UInt8] {
    var all: [UInt8] = []
    for try await part in stream { all += part }
    return all
}

@Suite("Database: attachments")
struct DatabaseAttachmentTests {
    @Test("an attached file becomes a new revision naming it; its content reads back whole, as parts and as a file")
    func attachAndRead() async throws {
        let test = try TestDatabase()
        let first = try await test.db.save(json: .object(["title": .string("photo")]), id: "doc")
        let (file, bytes) = try contentFile(test.directory, "photo.jpg", count: 3 << 20 | 12_345, seed: 1)
        let second = try await test.db.attach("photo.jpg", to: "doc", contentsOf: file, contentType: "image/jpeg", replacing: first)
        #expect(second.generation == 2)
        let metadata = try #require(try await test.db.attachments(of: "doc")?["photo.jpg"])
        #expect(metadata.contentType == "image/jpeg" && metadata.length == Int64(bytes.count) && metadata.revpos == 2)
        #expect(try await collect(test.db.attachmentContents("photo.jpg", of: "doc")) == bytes)
        #expect(try await Data(contentsOf: test.db.attachmentFile("photo.jpg", of: "doc")) == Data(bytes))
        #expect(try await test.db.document(id: "doc")?.body.objectValue?["title"] == .string("photo"), "the body is kept")
    }

    @Test("attachment metadata is part of the revision id: the same edit on two databases gives the same id, other content another")
    func revisionIDCoversAttachments() throws {
        let one = try TestDatabase(), two = try TestDatabase()
        let (file, _) = try contentFile(one.directory, "a.bin", count: 1000, seed: 2)
        let (other, _) = try contentFile(one.directory, "b.bin", count: 1000, seed: 3)
        var ids: [RevisionID] = []
        for (db, content) in [(one.db, file), (two.db, file), (two.db, other)] {
            let base = try db.save(json: .object(["n": .int(1)]), id: content == other ? "doc-other" : "doc")
            ids.append(try db.attach("a.bin", to: content == other ? "doc-other" : "doc", contentsOf: content, contentType: "application/octet-stream", replacing: base))
        }
        #expect(ids[0] == ids[1] && ids[0] != ids[2])
    }

    @Test("the same content attached to many documents is stored once")
    func storedOnce() throws {
        let test = try TestDatabase()
        let (file, _) = try contentFile(test.directory, "same.bin", count: 200_000, seed: 4)
        for index in 0..<20 {
            let base = try test.db.save(json: .object(["n": .int(Int64(index))]), id: "doc-\(index)")
            try test.db.attach("same.bin", to: "doc-\(index)", contentsOf: file, contentType: "application/octet-stream", replacing: base)
        }
        let stored = try FileManager.default.contentsOfDirectory(atPath: test.directory.path("db.sqlite-attachments"))
        #expect(stored.count == 1, "\(stored)")
    }

    @Test("a stale attach fails with the current revision; lastWriteWins attaches on top of the current body")
    func concurrency() throws {
        let test = try TestDatabase()
        let first = try test.db.save(json: .object(["v": .int(1)]), id: "doc")
        let second = try test.db.save(json: .object(["v": .int(2)]), id: "doc", replacing: first)
        let (file, _) = try contentFile(test.directory, "x.txt", count: 10, seed: 5)
        #expect(throws: DatabaseError.conflict(documentID: "doc", replacing: first, current: second)) {
            try test.db.attach("x.txt", to: "doc", contentsOf: file, contentType: "text/plain", replacing: first)
        }
        let third = try test.db.attach("x.txt", to: "doc", contentsOf: file, contentType: "text/plain", replacing: first, concurrency: .lastWriteWins)
        #expect(third.generation == 3)
        #expect(try test.db.document(id: "doc")?.body.objectValue?["v"] == .int(2))
        #expect(try test.db.attachments(of: "doc")?["x.txt"]?.revpos == 3)
    }

    @Test("detach removes the attachment in a new revision; detaching a name the revision lacks is not found")
    func detach() throws {
        let test = try TestDatabase()
        let first = try test.db.save(json: .object([:]), id: "doc")
        let (file, _) = try contentFile(test.directory, "x.txt", count: 10, seed: 6)
        let second = try test.db.attach("x.txt", to: "doc", contentsOf: file, contentType: "text/plain", replacing: first)
        let third = try test.db.detach("x.txt", from: "doc", replacing: second)
        #expect(try test.db.attachments(of: "doc") == [:])
        #expect(try test.db.document(id: "doc")?.body == .object([:]))
        #expect(throws: DatabaseError.notFound(documentID: "doc/x.txt", revision: third)) {
            try test.db.detach("x.txt", from: "doc", replacing: third)
        }
    }

    @Test("a body naming content this node lacks, or a malformed _attachments, is refused with nothing written")
    func refusedBodies() throws {
        let test = try TestDatabase()
        let missing = AttachmentMetadata(
            contentType: "text/plain", length: 3, digest: AttachmentDigest(bytes: [UInt8](repeating: 7, count: 32)), revpos: 1)
        let body = Attachments.body(.object(["n": .int(1)]), with: ["x": missing])
        do {
            try test.db.save(json: body, id: "doc")
            Issue.record("a body naming missing content was saved")
        } catch {
            #expect(error.description.contains("is not on this node"), "\(error)")
        }
        for bad: JSONValue in [
            .object(["_attachments": .array([])]),
            .object(["_attachments": .object(["x": .object(["content_type": .string("a"), "data": .string("aGk=")])])]),
            .object(["_attachments": .object(["_x": missing.json])]),
        ] {
            #expect(throws: DatabaseError.self) { try test.db.save(json: bad, id: "doc") }
        }
        #expect(try test.db.document(id: "doc") == nil)
    }

    @Test("content over the size limit is refused before anything is stored; content that no longer matches its digest fails the read")
    func limitsAndDamage() async throws {
        let directory = TemporaryDirectory()
        let store = AttachmentStore(directory: directory.path("content"), sizeLimit: 100)
        let (big, _) = try contentFile(directory, "big", count: 101, seed: 8)
        #expect(throws: StoreError.self) { try store.add(contentsOf: big.path) }
        let left = (try? FileManager.default.contentsOfDirectory(atPath: directory.path("content"))) ?? []
        #expect(left.isEmpty, "\(left)")

        let test = try TestDatabase()
        let base = try await test.db.save(json: .object([:]), id: "doc")
        let (file, _) = try contentFile(test.directory, "f", count: 5000, seed: 9)
        try await test.db.attach("f", to: "doc", contentsOf: file, contentType: "application/octet-stream", replacing: base)
        let stored = try await test.db.attachmentFile("f", of: "doc").path
        let handle = try #require(FileHandle(forUpdatingAtPath: stored))
        try handle.seek(toOffset: 100)
        try handle.write(contentsOf: Data([0xFF ^ 0x5A]))
        try handle.close()
        await #expect(throws: DatabaseError.self) { _ = try await collect(test.db.attachmentContents("f", of: "doc")) }
    }

    @Test("a peer's revision with well-formed stubs passes the check (its content is fetched later); one whose _attachments is malformed is refused with the reason")
    func peerRevisionsWithAttachmentsAreChecked() throws {
        let stub = AttachmentMetadata(contentType: "text/plain", length: 1, digest: AttachmentDigest(bytes: [UInt8](repeating: 1, count: 32)), revpos: 1)
        let body = Attachments.body(.object(["n": .int(1)]), with: ["x": stub])
        let id = RevisionHasher.revisionID(parent: nil, kind: .live, body: body)
        let good = try DocumentStore.checkForeign([
            ForeignRevision(documentID: "doc", path: try RevisionPath(leaf: id, kind: .live, ancestors: []), body: .value(body))
        ])
        #expect(good.count == 1 && good.rejected.isEmpty)
        let malformed: JSONValue = .object(["_attachments": .object(["x": .object(["stub": .bool(true)])])])
        let badID = RevisionHasher.revisionID(parent: nil, kind: .live, body: malformed)
        let bad = try DocumentStore.checkForeign([
            ForeignRevision(documentID: "doc", path: try RevisionPath(leaf: badID, kind: .live, ancestors: []), body: .value(malformed))
        ])
        #expect(bad.count == 0)
        #expect(bad.rejected.first?.description.contains("doc") == true, "\(bad.rejected)")
    }

    @Test("content that arrives in parts is stored under its digest only once every announced byte came; a short, long or dropped upload leaves nothing")
    func uploadsInParts() throws {
        let directory = TemporaryDirectory()
        let store = AttachmentStore(directory: directory.path("content"), sizeLimit: 1 << 20)
        let (file, bytes) = try contentFile(directory, "whole", count: 300_000, seed: 10)
        let upload = try store.beginUpload(length: Int64(bytes.count), from: "a test")
        for start in stride(from: 0, to: bytes.count, by: 65_536) {
            try bytes[start..<min(start + 65_536, bytes.count)].withUnsafeBytes { try upload.write($0) }
        }
        let stored = try upload.finish()
        #expect(stored == (try store.add(contentsOf: file.path)), "the same digest as the whole file's")
        #expect(try Data(contentsOf: URL(fileURLWithPath: store.path(of: stored.digest))) == Data(bytes))

        do {
            let short = try store.beginUpload(length: 10, from: "a short test")
            try [UInt8](repeating: 1, count: 4).withUnsafeBytes { try short.write($0) }
            #expect(throws: StoreError.self) { try short.finish() }
            let long = try store.beginUpload(length: 2, from: "a long test")
            #expect(throws: StoreError.self) { try [UInt8](repeating: 1, count: 3).withUnsafeBytes { try long.write($0) } }
            let dropped = try store.beginUpload(length: 5, from: "a dropped test")
            try [UInt8](repeating: 2, count: 5).withUnsafeBytes { try dropped.write($0) }
        }
        #expect(throws: StoreError.self) { try store.beginUpload(length: (1 << 20) + 1, from: "too large") }
        let left = try FileManager.default.contentsOfDirectory(atPath: directory.path("content"))
        #expect(left == [stored.digest.hex], "only the finished content stays: \(left)")
    }
}
