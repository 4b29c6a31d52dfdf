import CanopyCore
import Dispatch
import Testing
@testable import CanopyStore

/// Replication's batched reads (`revsDiff`, the changes feed, `revisionsToSend`) use the store's
/// second connection, so that a node answers a peer's `changes` while it writes an earlier batch.
@Suite("Snapshot reads")
struct SnapshotReadTests {
    @Test("batched reads answer from the last commit while a write transaction is in progress, and see it once it commits")
    func readsDuringWrite() throws {
        let inside = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        // The resolver runs inside the write transaction, under the store's lock: it holds the
        // transaction open until the test has read. Should a read wait for the lock instead,
        // the resolver gives up after 30 s, the write commits, and the reads below see it.
        let resolver = ClosureResolver { conflict in
            inside.signal()
            _ = release.wait(timeout: .now() + 30)
            return .keep(conflict.leaves[0].revision)
        }
        let test = try TestStore(.init(conflictPolicy: .custom(resolver)))
        let store = test.store
        let local = try store.put(id: "doc", body: body(1), replacing: nil)
        let sibling = try foreign("doc", body: body(2, "peer"))
        let fresh = try foreign("fresh", body: body(3))
        let writer = DispatchQueue(label: "test.writer")
        let written = DispatchSemaphore(value: 0)
        writer.async {
            _ = try? store.bulkInsertForeign([sibling, fresh])
            written.signal()
        }
        inside.wait()

        let diff = try store.revsDiff(inOrder: [
            RevisionOffer(documentID: "fresh", revisions: [fresh.path.leaf]),
            RevisionOffer(documentID: "doc", revisions: [sibling.path.leaf]),
        ])
        let changes = try store.changes(since: 0)
        let sent = try store.revisionsToSend([RevisionRequest(documentID: "doc", revisions: [local], knownAncestors: [])])
        release.signal()
        written.wait()

        #expect(diff.map { $0?.missing } == [[fresh.path.leaf], [sibling.path.leaf]])
        #expect(changes.map(\.documentID) == ["doc"])
        #expect(sent.map(\.path.leaf) == [local])
        // After the commit, the next read sees it.
        #expect(try store.revsDiff(inOrder: [RevisionOffer(documentID: "fresh", revisions: [fresh.path.leaf])]) == [nil])
        #expect(try store.changes(since: 0).map(\.documentID) == ["doc", "fresh"])
    }

    @Test("a snapshot read sees every write committed before it, on the same thread and from another")
    func readsSeeCommits() throws {
        let test = try TestStore()
        let store = test.store
        for n in 1...20 {
            let id = try store.put(id: "doc\(n)", body: body(n), replacing: nil)
            #expect(try store.revsDiff(inOrder: [RevisionOffer(documentID: "doc\(n)", revisions: [id])]) == [nil])
            #expect(try store.changes(since: Int64(n - 1)).map(\.documentID) == ["doc\(n)"])
        }
        // A second store object on the same file (another process, as far as SQLite knows).
        let other = try test.reopen()
        let late = try other.put(id: "late", body: body(0), replacing: nil)
        #expect(try store.revsDiff(inOrder: [RevisionOffer(documentID: "late", revisions: [late])]) == [nil])
    }
}
