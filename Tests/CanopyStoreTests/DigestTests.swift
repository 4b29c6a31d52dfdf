import CanopyCore
import Foundation
import Testing

@testable import CanopyStore

/// The database digest (`Protocol/digests.md`): its vectors, that it follows every kind of write
/// in the write transaction, that two stores holding the same documents agree whatever the order,
/// and that a file from before digests gets them at open.
@Suite("database digests")
struct DigestTests {
    static func revision(_ text: String) -> RevisionID { RevisionID(text)! }

    @Test("the specification's vectors: buckets, document digests and the digest of a database holding both")
    func vectors() throws {
        #expect(DigestTree.bucket(of: "doc-1") == 90 && DigestTree.bucket(of: "doc-2") == 91 && DigestTree.bucket(of: "") == 129)
        #expect(DigestTree.idHash(of: "doc-1") == 0x5A0F_449B && DigestTree.idHash(of: "doc-2") == 0x5B0F_462E)
        #expect(DigestNodePath(bytes: [0x5B, 0x0F])!.contains(DigestTree.idHash(of: "doc-2")))
        #expect(!DigestNodePath(bytes: [0x5B, 0x0E])!.contains(DigestTree.idHash(of: "doc-2")))
        #expect(DigestNodePath(bytes: [0x5A, 0x0F, 0x44])!.childIndex(of: DigestTree.idHash(of: "doc-1")) == 0x9B)
        let first = DigestTree.document(id: "doc-1", openLeaves: [(Self.revision("1-967a00dff5e02add41819138abb3284d"), false)])
        #expect(first.hex == "ba8e0b21cbfee5acb5cacc8810e61a6305446a9cf60dd884db6cf677dbfd14d5")
        // Leaves are taken in revision order, whatever order they are given in.
        let second = DigestTree.document(id: "doc-2", openLeaves: [
            (Self.revision("2-a1b2c3d4e5f60718293a4b5c6d7e8f90"), true), (Self.revision("2-7051cbe5c8faecd085a3fa619e6e6337"), false),
        ])
        #expect(second.hex == "827c04d48e8bfa3c8ef6d95cbf67a4d89c27ab1ebb467ac700253c2aa68ed255")
        var both = DatabaseDigest.empty
        both.toggle(first)
        both.toggle(second)
        #expect(both.hex == "38f20ff545751f903b3c15d4af81bebb9963c1824d4ba243db49ca5d7d73c680")
        #expect(DatabaseDigest.empty.hex == String(repeating: "0", count: 64))
        #expect(DatabaseDigest(bytes: both.bytes) == both && DatabaseDigest(bytes: [1, 2]) == nil)
    }

    /// The digest and counts the store keeps, against what its rows give.
    static func expectKeptMatchesRows(_ store: DocumentStore, _ context: String) throws {
        let computed = try store.read { db in try DigestBuckets.compute(db) }
        #expect(store.digestBuckets == computed, "\(context)")
        #expect(try store.documentCount == (try store.read { db in Int(try db.scalarInt("SELECT count(*) FROM documents") ?? 0) }), "\(context)")
        #expect(try store.deletedCount == (try store.read { db in Int(try db.scalarInt("SELECT count(*) FROM documents WHERE deleted = 1") ?? 0) }), "\(context)")
        let report = try store.checkRows()
        #expect(report.differingDigestBuckets == 0 && report.digestIndexDisagreements == 0, "\(context)")
        // The digest index finds every document under the root, and they give the kept digest.
        let indexed = try store.digestDocuments(prefix: "", under: [.root])
        #expect(indexed.count == (try store.documentCount), "\(context)")
        var digest = DatabaseDigest.empty
        for document in indexed { digest.toggle(document.digest) }
        #expect(digest == store.digest, "\(context)")
        #expect(DigestTree.children(of: .root, from: indexed) == store.digestRootChildren, "\(context)")
    }

    @Test("puts, batches, deletions, foreign revisions, conflicts and their resolution keep the digest and counts what the rows give")
    func followsEveryWrite() throws {
        let test = try TestStore(.init(conflictPolicy: .manual))
        let store = test.store
        #expect(store.digest == .empty)
        let first = try store.put(id: "a", body: body(1), replacing: nil)
        try Self.expectKeptMatchesRows(store, "after a put")
        let before = store.digest
        try store.put(id: "a", body: body(2), replacing: first)
        #expect(store.digest != before, "an update changes the open leaf")
        try Self.expectKeptMatchesRows(store, "after an update")
        _ = try store.putBatch((0..<300).map { LocalWrite(documentID: "batch-\($0)", body: body($0), replacing: nil) })
        try Self.expectKeptMatchesRows(store, "after a batch")
        let current = try store.get(id: "batch-7").revision
        try store.delete(id: "batch-7", rev: current)
        try Self.expectKeptMatchesRows(store, "after a deletion")
        #expect(try store.deletedCount == 1)
        _ = try store.bulkInsertForeign((0..<200).map { try foreign("foreign-\($0)", body: body($0, "peer")) })
        try Self.expectKeptMatchesRows(store, "after new documents from a peer")
        // A conflict: a peer's branch beside the local one; kept (manual), then resolved.
        _ = try store.bulkInsertForeign([try foreign("a", body: body(9, "branch"))])
        #expect(try store.conflictedDocumentIDs() == ["a"])
        try Self.expectKeptMatchesRows(store, "after a conflict")
        let conflicted = store.digest
        _ = try store.resolveConflicts(id: "a", resolver: BuiltInResolver.mergeJSON)
        #expect(store.digest != conflicted, "a resolution closes a leaf")
        try Self.expectKeptMatchesRows(store, "after a resolution")
        // Kept in the file.
        #expect(try DocumentStore(path: test.path).digest == store.digest)
    }

    @Test("two stores that receive the same revisions in different orders and batches have the same digest; one more document differs")
    func orderDoesNotMatter() throws {
        let revisions = try (0..<120).map { try foreign("doc-\($0)", body: body($0)) }
        let updates = try (0..<40).map { n in
            try foreign("doc-\(n)", parentPath: [revisions[n].path.leaf], body: body(n, "second"))
        }
        let (first, second) = (try TestStore(), try TestStore())
        let one = first.store
        _ = try one.bulkInsertForeign(revisions)
        _ = try one.bulkInsertForeign(updates)
        let other = second.store
        for revision in revisions.reversed() { _ = try other.bulkInsertForeign([revision]) }
        _ = try other.bulkInsertForeign(Array(updates.shuffled()))
        #expect(one.digest == other.digest && one.digest != .empty)
        try other.put(id: "extra", body: body(0), replacing: nil)
        #expect(one.digest != other.digest)
    }

    @Test("a write that rolls back leaves the digest and counts as they were")
    func rollbackLeavesItAlone() throws {
        let faults = FailingCommits()
        let test = try TestStore(.init(faultInjector: faults))
        let store = test.store
        try store.put(id: "kept", body: body(1), replacing: nil)
        let before = store.digest
        faults.failNext = true
        #expect(throws: (any Error).self) { try store.put(id: "lost", body: body(2), replacing: nil) }
        #expect(store.digest == before)
        #expect(try store.documentCount == 1)
        try Self.expectKeptMatchesRows(store, "after a failed commit")
    }

    @Test("a file from before digests gets its buckets computed from its rows when it is opened")
    func filledByTheSchemaStep() throws {
        let test = try TestStore()
        _ = try test.store.putBatch((0..<50).map { LocalWrite(documentID: "d\($0)", body: body($0), replacing: nil) })
        let digest = test.store.digest
        let db = try Database(path: test.path)
        try db.execute("DROP TABLE digest_buckets; DROP TABLE digest_index; PRAGMA user_version = 8")
        let reopened = try test.reopen()
        #expect(reopened.digest == digest)
        #expect(try reopened.documentCount == 50)
        try Self.expectKeptMatchesRows(reopened, "after the migration")
    }
}

/// Fails the next commit when asked to.
private final class FailingCommits: StoreFaultInjector, @unchecked Sendable {
    var failNext = false
    struct Failed: Error {}
    func beforeCommit() throws {
        if failNext {
            failNext = false
            throw Failed()
        }
    }
    func afterCommit() throws {}
}
