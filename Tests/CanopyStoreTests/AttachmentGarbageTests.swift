import CanopyCore
import Foundation
import Testing
@testable import CanopyStore

/// `count` bytes of `value`.
private func content(_ value: UInt8, count: Int = 1000) -> [UInt8] { [UInt8](repeating: value, count: count) }

/// The names in `directory`, sorted.
private func listing(_ directory: String) throws -> [String] {
    try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
}

@Suite("collecting attachment content no revision names")
struct AttachmentGarbageTests {
    @Test("a collection removes exactly the content no revision names, syncs, and reports what it removed and kept")
    func removesExactlyTheUnnamed() throws {
        let test = try TestStore()
        let attachments = test.store.attachments
        let (a, b, c) = (content(1), content(2), content(3, count: 1234))
        let digests = try [a, b, c].map { try storedUnpinned($0, in: attachments) }
        try test.store.put(id: "one", body: naming(digests[0], of: a), replacing: nil)
        try test.store.put(id: "two", body: naming(digests[1], of: b), replacing: nil)
        #expect(try test.store.namedAttachmentDigests() == [digests[0], digests[1]])

        let report = try DocumentStore.collectAttachmentGarbage(of: [test.store])
        #expect(report == AttachmentGarbageReport(removedFiles: 1, freedBytes: 1234, namedFiles: 2, pinnedFiles: 0))
        #expect(attachments.contains(digests[0]) && attachments.contains(digests[1]))
        #expect(!attachments.contains(digests[2]))
        #expect(try DocumentStore.collectAttachmentGarbage(of: [test.store]) == AttachmentGarbageReport(namedFiles: 2))
    }

    @Test("content named only by a non-leaf revision whose body is still stored is kept; once compaction drops that body it is removed")
    func nonLeafBodiesCount() throws {
        let test = try TestStore()
        let bytes = content(4)
        let digest = try storedUnpinned(bytes, in: test.store.attachments)
        let first = try test.store.put(id: "doc", body: naming(digest, of: bytes), replacing: nil)
        try test.store.put(id: "doc", body: .object(["n": .int(2)]), replacing: first)
        #expect(try test.store.get(id: "doc", rev: first).body == naming(digest, of: bytes), "the old body is stored")

        #expect(try DocumentStore.collectAttachmentGarbage(of: [test.store]).namedFiles == 1)
        #expect(test.store.attachments.contains(digest))
        try test.store.compact()
        #expect(try DocumentStore.collectAttachmentGarbage(of: [test.store]).removedFiles == 1)
        #expect(!test.store.attachments.contains(digest))
    }

    @Test("the body of a deleted document's last live revision counts while it is stored")
    func deletedDocumentsOldBody() throws {
        let test = try TestStore()
        let bytes = content(5)
        let digest = try storedUnpinned(bytes, in: test.store.attachments)
        let first = try test.store.put(id: "doc", body: naming(digest, of: bytes), replacing: nil)
        try test.store.delete(id: "doc", rev: first)
        _ = try DocumentStore.collectAttachmentGarbage(of: [test.store])
        #expect(test.store.attachments.contains(digest))
        try test.store.compact()
        _ = try DocumentStore.collectAttachmentGarbage(of: [test.store])
        #expect(!test.store.attachments.contains(digest))
    }

    @Test("pinned content survives a collection; released, the next collection removes it")
    func pinnedSurvives() throws {
        let test = try TestStore()
        let digest = try storedUnpinned(content(6), in: test.store.attachments)
        let pin = test.store.attachments.pin(digest)
        #expect(try DocumentStore.collectAttachmentGarbage(of: [test.store]) == AttachmentGarbageReport(pinnedFiles: 1))
        #expect(test.store.attachments.contains(digest))
        pin.release()
        pin.release()
        #expect(try DocumentStore.collectAttachmentGarbage(of: [test.store]).removedFiles == 1)
        #expect(!test.store.attachments.contains(digest))
    }

    @Test("content pinned at any moment of a collection is kept: pinned before and released during the scan, or pinned and released during it")
    func pinsDuringTheCollection() throws {
        let test = try TestStore()
        let attachments = test.store.attachments
        let before = try storedUnpinned(content(7), in: attachments)
        let during = try storedUnpinned(content(8), in: attachments)
        let never = try storedUnpinned(content(9), in: attachments)
        let held = attachments.pin(before)
        let report = try attachments.collectGarbage { () throws(StoreError) -> Set<AttachmentDigest> in
            let named = try test.store.namedAttachmentDigests()
            held.release()
            attachments.withPin(during) {}
            return named
        }
        #expect(report == AttachmentGarbageReport(removedFiles: 1, freedBytes: 1000, pinnedFiles: 2))
        #expect(attachments.contains(before) && attachments.contains(during) && !attachments.contains(never))
        #expect(try attachments.collectGarbage { [] }.removedFiles == 2, "nothing holds them any more")
    }

    @Test("a write that holds its pin from finish to commit keeps its content through a collection in between; without the pin the content is removed and the write refused")
    func pinFromFinishToCommit() throws {
        let test = try TestStore()
        let bytes = content(10)
        let content = try stored(bytes, in: test.store.attachments)
        _ = try DocumentStore.collectAttachmentGarbage(of: [test.store])
        try test.store.put(id: "pinned", body: naming(content.digest, of: bytes), replacing: nil)
        content.pin.release()
        #expect(try DocumentStore.collectAttachmentGarbage(of: [test.store]) == AttachmentGarbageReport(namedFiles: 1))
        #expect(test.store.attachments.contains(content.digest))

        let other = [UInt8](repeating: 11, count: 500)
        let unpinned = try storedUnpinned(other, in: test.store.attachments)
        _ = try DocumentStore.collectAttachmentGarbage(of: [test.store])
        #expect(throws: StoreError.self) { try test.store.put(id: "unpinned", body: naming(unpinned, of: other), replacing: nil) }
    }

    @Test("content a collection removed while its writer was about to store it again ends up present: pinned after the scan it is kept, pinned after the removal it is written again")
    func storingAgainDuringACollection() throws {
        let test = try TestStore()
        let attachments = test.store.attachments
        let bytes = content(12)
        let digest = try storedUnpinned(bytes, in: attachments)

        var writer: AttachmentPin?
        let report = try attachments.collectGarbage { () throws(StoreError) -> Set<AttachmentDigest> in
            let named = try test.store.namedAttachmentDigests()
            let again = try stored(bytes, in: attachments)
            writer = again.pin
            return named
        }
        #expect(report == AttachmentGarbageReport(pinnedFiles: 1))
        try test.store.put(id: "doc", body: naming(digest, of: bytes), replacing: nil)
        writer?.release()
        #expect(attachments.contains(digest))

        let other = content(13)
        let removed = try storedUnpinned(other, in: attachments)
        _ = try attachments.collectGarbage { [] }
        #expect(!attachments.contains(removed))
        let again = try stored(other, in: attachments)
        defer { again.pin.release() }
        #expect(again.digest == removed && attachments.contains(removed, length: Int64(other.count)))
        try test.store.put(id: "doc2", body: naming(removed, of: other), replacing: nil)
        #expect(attachments.contains(removed))
    }

    @Test("a read pins the content it reads: a collection during the read keeps it")
    func readsPin() throws {
        let test = try TestStore()
        let attachments = test.store.attachments
        let digest = try storedUnpinned(content(14), in: attachments)
        var report: AttachmentGarbageReport?
        try attachments.read(digest) { _ in
            if report == nil { report = try attachments.collectGarbage { [] } }
        }
        #expect(report == AttachmentGarbageReport(pinnedFiles: 1))
        #expect(attachments.contains(digest))
    }

    @Test("incoming- files of uploads in progress and files not named as a digest are never touched")
    func othersUntouched() throws {
        let test = try TestStore()
        let attachments = test.store.attachments
        let digest = try storedUnpinned(content(15), in: attachments)
        let bytes = content(16)
        let upload = try attachments.beginUpload(length: Int64(bytes.count), from: "a test")
        try bytes[..<10].withUnsafeBytes { try upload.write($0) }
        let strangers = ["notes.txt", String(repeating: "A", count: 64), String(repeating: "a", count: 63), "incoming-0123456789abcdef"]
        for name in strangers { try Data([1]).write(to: URL(fileURLWithPath: attachments.directory + "/" + name)) }
        let before = try listing(attachments.directory)

        #expect(try attachments.collectGarbage { [] } == AttachmentGarbageReport(removedFiles: 1, freedBytes: 1000))
        #expect(try listing(attachments.directory) == before.filter { $0 != digest.hex })
        try bytes[10...].withUnsafeBytes { try upload.write($0) }
        let finished = try upload.finish()
        #expect(attachments.contains(finished.digest, length: Int64(bytes.count)))
    }

    @Test("two stores sharing one directory: content named by either is kept, and a pin taken through one holds against a collection through the other")
    func sharedDirectory() throws {
        let directory = TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: directory.path("attachments"), withIntermediateDirectories: false)
        try FileManager.default.createSymbolicLink(atPath: directory.path("alias"), withDestinationPath: directory.path("attachments"))
        let one = try DocumentStore(path: directory.path("one.sqlite"), configuration: .init(attachmentsDirectory: directory.path("attachments")))
        let two = try DocumentStore(path: directory.path("two.sqlite"), configuration: .init(attachmentsDirectory: directory.path("alias/")))
        #expect(one.attachments.sharesDirectory(with: two.attachments) && !one.ownsAttachmentDirectory)
        let (a, b) = (content(17), content(18))
        let digestA = try storedUnpinned(a, in: one.attachments), digestB = try storedUnpinned(b, in: two.attachments)
        let pinned = try storedUnpinned(content(19), in: one.attachments)
        let unnamed = try storedUnpinned(content(20), in: two.attachments)
        try one.put(id: "doc", body: naming(digestA, of: a), replacing: nil)
        try two.put(id: "doc", body: naming(digestB, of: b), replacing: nil)

        let pin = one.attachments.pin(pinned)
        defer { pin.release() }
        let report = try DocumentStore.collectAttachmentGarbage(of: [two, one])
        #expect(report == AttachmentGarbageReport(removedFiles: 1, freedBytes: 1000, namedFiles: 2, pinnedFiles: 1))
        #expect([digestA, digestB, pinned].allSatisfy { two.attachments.contains($0) } && !one.attachments.contains(unnamed))

        let elsewhere = try TestStore()
        #expect(throws: StoreError.self) { try DocumentStore.collectAttachmentGarbage(of: [one, elsewhere.store]) }
        #expect(throws: StoreError.self) { try DocumentStore.collectAttachmentGarbage(of: []) }
        #expect(try listing(directory.path("attachments")).count == 3, "a refused collection removes nothing")
    }

    @Test("the named digests come from every stored body's top-level _attachments member only")
    func namedDigests() throws {
        let test = try TestStore()
        let bytes = content(21)
        let digest = try storedUnpinned(bytes, in: test.store.attachments)
        let lookalike = AttachmentDigest(bytes: [UInt8](repeating: 9, count: 32))
        try test.store.put(id: "nested", body: .object(["x": .object(["_attachments": .string(lookalike.description)])]), replacing: nil)
        try test.store.put(id: "text", body: .object(["t": .string("\"_attachments\":\(lookalike)")]), replacing: nil)
        try test.store.put(id: "doc", body: naming(digest, of: bytes), replacing: nil)
        #expect(try test.store.namedAttachmentDigests() == [digest])
        let empty = try TestStore()
        #expect(try empty.store.namedAttachmentDigests() == [])
    }
}
