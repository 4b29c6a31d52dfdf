import CanopyCore
import Foundation
import Testing
@testable import CanopyStore

/// A peer's revision that names content this store lacks, as replication hands it over: with
/// the id its content hashes to.
private func foreignRevision(_ id: String, naming bytes: [UInt8], text: String = "x") throws -> (ForeignRevision, AttachmentDigest) {
    let digest = AttachmentDigest(bytes: Blake2b.hash(bytes, outputBytes: AttachmentDigest.byteCount))
    let stub = AttachmentMetadata(contentType: "image/png", length: Int64(bytes.count), digest: digest, revpos: 1)
    let body = Attachments.body(.object(["text": .string(text)]), with: ["photo": stub])
    let leaf = RevisionHasher.revisionID(parent: nil, kind: .live, canonicalBody: CanonicalJSON.encode(body))
    return (ForeignRevision(documentID: id, path: try RevisionPath(leaf: leaf, kind: .live), body: .value(body)), digest)
}

private func pattern(_ count: Int, seed: UInt8 = 1) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) }
}

@Suite("revisions set aside until their attachment content is here")
struct AwaitingContentTests {
    @Test("a revision naming absent content is set aside, invisible and durable, and merged with its id once the content is fetched, across a reopen and a resumed download")
    func setAsideThenSettled() throws {
        let test = try TestStore()
        let bytes = pattern(700_000)
        let (revision, digest) = try foreignRevision("photo", naming: bytes)
        let results = try test.store.bulkInsertForeign([revision, ForeignRevision(
            documentID: "plain-doc", path: try RevisionPath(
                leaf: RevisionHasher.revisionID(parent: nil, kind: .live, canonicalBody: CanonicalJSON.encode(.object(["a": .int(1)]))), kind: .live),
            body: .value(.object(["a": .int(1)])))])
        #expect(results.map(\.documentID) == ["plain-doc"], "only the document without attachments is written now")
        #expect(throws: StoreError.self) { try test.store.get(id: "photo") }
        #expect(try test.store.awaitingContentCount() == 1)
        #expect(try test.store.awaitedAttachments() == [AwaitedAttachment(digest: digest, length: Int64(bytes.count))])
        #expect(test.store.setAsideCount == 1)
        #expect(try test.store.integrityCheck() == "ok", "the set-aside tables pass SQLite's integrity check")
        // Content on its way counts as named (a collection keeps it), not as content that must be here.
        #expect(try test.store.namedAttachmentDigests() == [digest])
        #expect(try test.store.namedAttachmentDigests(includingSetAside: false).isEmpty)

        // Half the content, then the process goes away.
        do {
            let download = try test.store.beginDownload(digest, length: Int64(bytes.count))
            try bytes[..<300_000].withUnsafeBytes { try download.append($0) }
        }
        let reopened = try test.reopen()
        #expect(try reopened.awaitingContentCount() == 1, "the set-aside revision survived")
        let download = try reopened.beginDownload(digest, length: Int64(bytes.count))
        #expect(download.received == 300_000, "the fetch resumes from the bytes on disk")
        try bytes[300_000...].withUnsafeBytes { try download.append($0) }
        #expect(try reopened.settleAwaitingContent(digests: [digest]).results.isEmpty, "nothing merges before the content is complete")
        try download.verify()
        try reopened.publishDownloads([digest])
        let settled = try reopened.settleAwaitingContent(digests: [digest])
        #expect(settled.results.map(\.documentID) == ["photo"] && !settled.more)
        #expect(try reopened.get(id: "photo").revision == revision.path.leaf)
        #expect(try reopened.awaitingContentCount() == 0)
        #expect(try reopened.awaitedAttachments().isEmpty)
        #expect(!FileManager.default.fileExists(atPath: reopened.attachments.directory + "/partial-" + digest.hex))
    }

    @Test("a revision set aside that arrives again once its content is here is written, and its set-aside copy is forgotten")
    func setAsideCopyForgottenWhenWritten() throws {
        let test = try TestStore()
        let bytes = pattern(5000, seed: 3)
        let (revision, digest) = try foreignRevision("photo", naming: bytes)
        try test.store.bulkInsertForeign([revision])
        #expect(try test.store.awaitingContentCount() == 1)
        // The content comes by another way (here an upload that a local document names).
        let upload = try test.store.attachments.beginUpload(length: Int64(bytes.count), from: "a test")
        try bytes.withUnsafeBytes { raw in try upload.write(raw) }
        let content = try upload.finishPinned()
        defer { content.pin.release() }
        #expect(content.digest == digest)
        let stub = AttachmentMetadata(contentType: "image/png", length: Int64(bytes.count), digest: digest, revpos: 1)
        try test.store.put(id: "local", body: Attachments.body(.object(["n": .int(1)]), with: ["photo": stub]), replacing: nil)
        // The first revision comes again from another peer, its content here: written at once.
        try test.store.bulkInsertForeign([revision])
        #expect(try test.store.get(id: "photo").revision == revision.path.leaf)
        #expect(try test.store.awaitingContentCount() == 0, "the set-aside copy of a revision in the tree waits for nothing")
    }

    @Test("content that does not hash to its digest is discarded, and the revisions waiting for it are refused by document")
    func mismatchRefused() throws {
        let test = try TestStore()
        let bytes = pattern(1000)
        let (first, digest) = try foreignRevision("one", naming: bytes)
        let (second, _) = try foreignRevision("two", naming: bytes, text: "y")
        try test.store.bulkInsertForeign([first, second])
        var wrong = bytes
        wrong[10] ^= 1
        let download = try test.store.beginDownload(digest, length: Int64(bytes.count))
        try wrong.withUnsafeBytes { try download.append($0) }
        #expect(throws: StoreError.self) { try download.verify() }
        #expect(!test.store.attachments.contains(digest))
        #expect(try test.store.refuseAwaiting(digest: digest).sorted() == ["one", "two"])
        #expect(try test.store.awaitingContentCount() == 0)
    }

    @Test("content a set-aside revision names is kept by a collection, and content already here lets a revision through at once")
    func collectionKeepsAwaitedContent() throws {
        let test = try TestStore()
        let present = pattern(5000, seed: 2)
        let upload = try test.store.attachments.beginUpload(length: Int64(present.count), from: "a test")
        try present.withUnsafeBytes { try upload.write($0) }
        let stored = try upload.finish()
        // A revision naming the content here and another that is not: set aside, and the
        // content here is still named.
        let absent = pattern(4000, seed: 3)
        let absentDigest = AttachmentDigest(bytes: Blake2b.hash(absent, outputBytes: AttachmentDigest.byteCount))
        let stubs = [
            "here": AttachmentMetadata(contentType: "text/plain", length: stored.length, digest: stored.digest, revpos: 1),
            "later": AttachmentMetadata(contentType: "text/plain", length: Int64(absent.count), digest: absentDigest, revpos: 1),
        ]
        let body = Attachments.body(.object([:]), with: stubs)
        let leaf = RevisionHasher.revisionID(parent: nil, kind: .live, canonicalBody: CanonicalJSON.encode(body))
        try test.store.bulkInsertForeign([ForeignRevision(documentID: "both", path: try RevisionPath(leaf: leaf, kind: .live), body: .value(body))])
        #expect(try test.store.awaitedAttachments().map(\.digest) == [absentDigest])
        let report = try DocumentStore.collectAttachmentGarbage(of: [test.store])
        #expect(report.removedFiles == 0 && test.store.attachments.contains(stored.digest))
        // A revision naming only content that is here is written at once.
        let (ready, _) = try foreignRevision("ready", naming: present)
        #expect(try test.store.bulkInsertForeign([ready]).map(\.documentID) == ["ready"])
    }
}

extension AwaitingContentTests {
    @Test("a collection removes the partial file of content nothing waits for, and keeps one a set-aside revision waits for or a download holds")
    func partialFilesCollected() throws {
        let test = try TestStore()
        let attachments = test.store.attachments
        let awaited = pattern(3000, seed: 4)
        let (revision, awaitedDigest) = try foreignRevision("waits", naming: awaited)
        try test.store.bulkInsertForeign([revision])
        let orphan = AttachmentDigest(bytes: Blake2b.hash(pattern(10, seed: 5), outputBytes: AttachmentDigest.byteCount))
        let held = AttachmentDigest(bytes: Blake2b.hash(pattern(10, seed: 6), outputBytes: AttachmentDigest.byteCount))
        for digest in [awaitedDigest, orphan] {
            let download = try test.store.beginDownload(digest, length: 3000)
            try pattern(100).withUnsafeBytes { try download.append($0) }
        }
        let holding = try test.store.beginDownload(held, length: 10)
        let report = try withExtendedLifetime(holding) { try DocumentStore.collectAttachmentGarbage(of: [test.store]) }
        let left = try FileManager.default.contentsOfDirectory(atPath: attachments.directory).sorted()
        #expect(left == ["partial-" + awaitedDigest.hex, "partial-" + held.hex].sorted(), "\(left)")
        #expect(report.removedFiles == 1 && report.pinnedFiles == 1, "\(report)")
    }
}
