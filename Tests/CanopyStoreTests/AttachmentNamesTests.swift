import CanopyCore
import Foundation
import Testing
@testable import CanopyStore

@Suite("attachment content a peer may fetch through a database")
struct AttachmentNamesTests {
    /// Two stores whose content lives in one directory, as an agent's databases do.
    private static func sharingDirectory(_ directory: TemporaryDirectory) throws -> (DocumentStore, DocumentStore) {
        let configuration = DocumentStore.Configuration(attachmentsDirectory: directory.path("attachments"))
        return (
            try DocumentStore(path: directory.path("shared.sqlite"), configuration: configuration),
            try DocumentStore(path: directory.path("private.sqlite"), configuration: configuration)
        )
    }

    /// `bytes` stored in the shared directory and named by a revision of `secret` only: its digest.
    private static func heldOnly(by secret: DocumentStore, _ bytes: [UInt8]) throws -> AttachmentDigest {
        let digest = try storedUnpinned(bytes, in: secret.attachments)
        try secret.put(id: "held", body: naming(digest, of: bytes), replacing: nil)
        return digest
    }

    @Test("content only another database names is not sent; once a revision of this database names it, it is, by a local write or a peer's")
    func onlyWhatTheDatabaseNames() throws {
        let directory = TemporaryDirectory()
        let (shared, secret) = try Self.sharingDirectory(directory)
        let bytes = [UInt8]((0..<3000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        let digest = try storedUnpinned(bytes, in: secret.attachments)
        try secret.put(id: "contract", body: naming(digest, of: bytes), replacing: nil)
        #expect(shared.attachments.contains(digest), "one directory holds it for both")
        #expect(try secret.attachmentPart(of: digest, offset: 0, maxBytes: 1 << 20)?.bytes == bytes)
        #expect(try !shared.namesAttachment(digest))
        #expect(try shared.attachmentPart(of: digest, offset: 0, maxBytes: 1 << 20) == nil)

        // A peer's revision naming it, in a batch of several documents.
        try shared.bulkInsertForeign([
            try foreign("plain", body: body(1)),
            try foreign("copy", body: naming(digest, of: bytes, n: 2)),
        ])
        #expect(try shared.namesAttachment(digest))
        #expect(try shared.attachmentPart(of: digest, offset: 1000, maxBytes: 10)?.bytes == Array(bytes[1000..<1010]))

        // A local write in a third database sharing the directory.
        let third = try DocumentStore(
            path: directory.path("third.sqlite"), configuration: DocumentStore.Configuration(attachmentsDirectory: directory.path("attachments")))
        #expect(try third.attachmentPart(of: digest, offset: 0, maxBytes: 16) == nil)
        let first = try third.put(id: "doc", body: body(1), replacing: nil)
        try third.put(id: "doc", body: naming(digest, of: bytes), replacing: first)
        #expect(try third.attachmentPart(of: digest, offset: 0, maxBytes: 16)?.bytes == Array(bytes[0..<16]))
    }

    @Test("a peer's revision naming content the directory holds for another database only is set aside until a fetch of this database verifies it; a local import is taken as it is")
    func peersMustSendContentOfOtherDatabases() throws {
        let directory = TemporaryDirectory()
        let (shared, secret) = try Self.sharingDirectory(directory)
        let bytes = [UInt8](repeating: 9, count: 500)
        let digest = try Self.heldOnly(by: secret, bytes)

        // From a peer: set aside, as if the content were not here, and not sent on.
        let probe = try foreign("probe", body: naming(digest, of: bytes))
        let results = try shared.bulkInsertForeign(checked: DocumentStore.checkForeign([probe]))
        #expect(results.isEmpty, "nothing merged")
        #expect(try shared.awaitedAttachments().map(\.digest) == [digest])
        #expect(!shared.holdsAttachment(digest, length: Int64(bytes.count)), "the peer is asked for it")
        #expect(try !shared.namesAttachment(digest))
        #expect(try shared.attachmentPart(of: digest, offset: 0, maxBytes: 16) == nil)
        #expect(try shared.settleAwaitingContent().results.isEmpty, "a pass over every set-aside revision does not take the other database's copy")
        #expect(try shared.awaitedAttachments().count == 1)

        // A fetch of this database verified it: the revision is merged and the content is this database's.
        let settled = try shared.settleAwaitingContent(digests: [digest])
        #expect(settled.results.map(\.documentID) == ["probe"])
        #expect(try shared.awaitedAttachments().isEmpty && shared.namesAttachment(digest))
        #expect(shared.holdsAttachment(digest, length: Int64(bytes.count)))

        // An import (the administrator's, trusted) names content already here as it is.
        let imported = try DocumentStore(
            path: directory.path("imported.sqlite"), configuration: DocumentStore.Configuration(attachmentsDirectory: directory.path("attachments")))
        try imported.bulkInsertForeign([try foreign("copy", body: naming(digest, of: bytes))], idCheck: .trusted)
        #expect(try imported.awaitedAttachments().isEmpty && imported.namesAttachment(digest))
    }

    @Test("content a fetch of this database verified is its own even when the revision that waited for it was already held as an ancestor")
    func verifiedContentIsNamedWithoutAStoredBody() throws {
        let directory = TemporaryDirectory()
        let (shared, secret) = try Self.sharingDirectory(directory)
        let bytes = [UInt8](repeating: 4, count: 700)
        let digest = try Self.heldOnly(by: secret, bytes)
        // A peer's revision naming it waits; its child, without attachments, arrives and is merged.
        let first = try foreign("doc", body: naming(digest, of: bytes))
        try shared.bulkInsertForeign(checked: DocumentStore.checkForeign([first]))
        let child = try foreign("doc", parentPath: [first.path.leaf], body: body(2))
        try shared.bulkInsertForeign(checked: DocumentStore.checkForeign([child]))
        #expect(try shared.get(id: "doc").revision == child.path.leaf)
        // The fetch completes: the waiting revision is an ancestor now, stored without a body.
        _ = try shared.settleAwaitingContent(digests: [digest])
        #expect(try shared.awaitedAttachments().isEmpty && shared.namesAttachment(digest))
        let later = try foreign("other", body: naming(digest, of: bytes, n: 3))
        #expect(try shared.bulkInsertForeign(checked: DocumentStore.checkForeign([later])).count == 1, "merged at once: the content is this database's")
    }

    @Test("a revision set aside for content the node lacks does not make it this database's")
    func setAsideRevisionsDoNotName() throws {
        let directory = TemporaryDirectory()
        let bytes = [UInt8](repeating: 7, count: 500)
        let elsewhere = try TestStore()
        let digest = try storedUnpinned(bytes, in: elsewhere.store.attachments)
        let store = try DocumentStore(path: directory.path("s.sqlite"))
        try store.bulkInsertForeign([try foreign("doc", body: naming(digest, of: bytes))])
        #expect(try store.awaitedAttachments().map(\.digest) == [digest])
        #expect(try !store.namesAttachment(digest))
    }

    @Test("what a database named stays fetchable through it after compaction drops the revision that named it")
    func namesOnlyGrow() throws {
        let test = try TestStore()
        let bytes = [UInt8](repeating: 3, count: 800)
        let digest = try storedUnpinned(bytes, in: test.store.attachments)
        let first = try test.store.put(id: "doc", body: naming(digest, of: bytes), replacing: nil)
        try test.store.put(id: "doc", body: body(2), replacing: first)
        #expect(try test.store.compact() == 1)
        #expect(try test.store.namedAttachmentDigests().isEmpty, "no stored body names it any more")
        #expect(try test.store.attachmentPart(of: digest, offset: 0, maxBytes: 8)?.bytes == Array(bytes[0..<8]))
    }

    @Test("a file from before the list gets it filled from its stored bodies when it is opened")
    func filledByTheSchemaStep() throws {
        let test = try TestStore()
        let bytes = [UInt8](repeating: 5, count: 300)
        let digest = try storedUnpinned(bytes, in: test.store.attachments)
        try test.store.put(id: "named", body: naming(digest, of: bytes), replacing: nil)
        try test.store.put(id: "plain", body: body(1), replacing: nil)
        // The file as the build before wrote it: version 4, no list.
        let db = try Database(path: test.path)
        try db.execute("DROP TABLE attachment_names; DROP TABLE kept_imported_conflicts; ALTER TABLE revisions DROP COLUMN closed_child; ALTER TABLE documents DROP COLUMN row_check; DROP TABLE digest_buckets; DROP TABLE digest_index; PRAGMA user_version = 4")
        let reopened = try test.reopen()
        #expect(try db.pragmaInt("user_version") == Int64(Schema.currentVersion))
        #expect(try reopened.namesAttachment(digest))
        #expect(try db.scalarInt("SELECT count(*) FROM attachment_names") == 1)
    }
}
