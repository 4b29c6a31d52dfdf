import CanopyCore
import CanopySimulation
import CanopyStore
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import CanopyReplication

/// A peer replicating one database gets only the attachment content that database names, even
/// where the node's databases keep their content in one directory.
@Suite("attachment content is sent only through a database that names it")
struct AttachmentScopeReplicationTests {
    /// Stores `bytes` in `node`'s attachment directory (unpinned) and returns their digest.
    static func store(_ bytes: [UInt8], in node: ReplicationHarness.Node) throws -> AttachmentDigest {
        let upload = try node.store.attachments.beginUpload(length: Int64(bytes.count), from: "a test")
        try bytes.withUnsafeBytes { raw in try upload.write(raw) }
        let content = try upload.finishPinned()
        content.pin.release()
        return content.digest
    }

    @Test("a peer awaiting content only another database of the source names is answered notFound; once the replicated database names it, the content comes")
    func contentOfAnotherDatabaseIsNotSent() throws {
        let harness = try ReplicationHarness(seed: 41)
        let shared = harness.directory.appendingPathComponent("a-attachments").path
        let sourceShared = try harness.addNode("a-shared", attachmentsDirectory: shared)
        let sourcePrivate = try harness.addNode("a-private", attachmentsDirectory: shared)
        let target = try harness.addNode("b-shared")

        // The source's private database holds a contract with its content.
        let bytes = [UInt8]((0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
        let digest = try Self.store(bytes, in: sourcePrivate)
        let stub = AttachmentMetadata(contentType: "application/pdf", length: Int64(bytes.count), digest: digest, revpos: 1)
        try sourcePrivate.store.put(id: "contract", body: Attachments.body(.object(["secret": .bool(true)]), with: ["c.pdf": stub]), replacing: nil)
        #expect(sourceShared.store.attachments.contains(digest))

        // The target holds a revision naming that content, set aside until the content is here
        // (a peer that knows the digest asks for it through the database it may replicate).
        let probe = Attachments.body(.object(["probe": .bool(true)]), with: ["c.pdf": stub])
        try target.store.bulkInsertForeign([ForeignRevision(
            documentID: "probe", path: try RevisionPath(leaf: RevisionHasher.revisionID(parent: nil, kind: .live, body: probe), kind: .live, ancestors: []),
            body: .value(probe))])
        #expect(try target.store.awaitedAttachments().map(\.digest) == [digest])

        harness.connect(sourceShared, target)
        #expect(harness.runUntilQuiescent())
        #expect(!target.store.attachments.contains(digest), "the content of the private database was sent")
        #expect(try target.store.awaitedAttachments().map(\.digest) == [digest])
        #expect((try? target.store.get(id: "probe")) == nil, "a revision whose content is not here is not visible")

        // Once a document of the shared database names the same content, it is the shared
        // database's to send: the next session fetches it and both revisions become visible.
        try sourceShared.store.put(id: "copy", body: Attachments.body(.object(["copy": .bool(true)]), with: ["c.pdf": stub]), replacing: nil)
        harness.connect(sourceShared, target)
        #expect(harness.runUntilQuiescent())
        #expect(target.store.attachments.contains(digest))
        #expect(try target.store.awaitedAttachments().isEmpty)
        #expect(try target.store.get(id: "probe").body == probe)
        #expect(try target.store.get(id: "copy").body == Attachments.body(.object(["copy": .bool(true)]), with: ["c.pdf": stub]))
    }

    @Test("a peer naming content the receiver holds for another database only must send it: one that only knows the digest gets nothing in; one that holds the bytes sends them")
    func peersMustHoldWhatTheyName() throws {
        let harness = try ReplicationHarness(seed: 43)
        let shared = harness.directory.appendingPathComponent("b-attachments").path
        let source = try harness.addNode("a-shared")
        let target = try harness.addNode("b-shared", attachmentsDirectory: shared)
        let targetPrivate = try harness.addNode("b-private", attachmentsDirectory: shared)

        let bytes = [UInt8]((0..<50_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 1) })
        let digest = try Self.store(bytes, in: targetPrivate)
        let stub = AttachmentMetadata(contentType: "text/plain", length: Int64(bytes.count), digest: digest, revpos: 1)
        try targetPrivate.store.put(id: "secret", body: Attachments.body(.object(["secret": .bool(true)]), with: ["s.txt": stub]), replacing: nil)

        // The source names the content in a document but does not hold it (its file is gone).
        #expect(try Self.store(bytes, in: source) == digest)
        let claim = Attachments.body(.object(["claim": .bool(true)]), with: ["s.txt": stub])
        try source.store.put(id: "claim", body: claim, replacing: nil)
        #expect(unlink(source.store.attachments.path(of: digest)) == 0)
        harness.connect(source, target)
        #expect(harness.runUntilQuiescent())
        #expect((try? target.store.get(id: "claim")) == nil, "the other database's copy made the claim visible")
        #expect(try target.store.awaitedAttachments().map(\.digest) == [digest], "still waiting for the peer to send it")
        #expect(try !target.store.namesAttachment(digest))
        #expect(try target.store.attachmentPart(of: digest, offset: 0, maxBytes: 16) == nil)

        // With the bytes, the source sends them; they hash to the digest and the claim is merged.
        #expect(try Self.store(bytes, in: source) == digest)
        harness.connect(source, target)
        #expect(harness.runUntilQuiescent())
        #expect(try target.store.get(id: "claim").body == claim)
        #expect(try target.store.awaitedAttachments().isEmpty && target.store.namesAttachment(digest))
    }
}
