import CanopyCore
import Foundation
import Testing
@testable import CanopyStore

@Suite("WAL checkpoints in the background")
struct BackgroundCheckpointTests {
    /// A writer whose checkpoints a `BackgroundCheckpointer` with small thresholds takes over.
    private func writer(_ directory: TemporaryDirectory, start: Int, inline: Int) throws -> (Database, BackgroundCheckpointer) {
        let path = directory.path("db.sqlite")
        let db = try Database(path: path)
        try db.execute("CREATE TABLE t (x INTEGER PRIMARY KEY, body BLOB NOT NULL)")
        let checkpointer = try BackgroundCheckpointer(path: path, durable: false, logger: .init(label: "test"),
                                                      startFrames: start, inlineFrames: inline)
        db.replaceAutomaticCheckpoints(with: checkpointer)
        return (db, checkpointer)
    }

    /// The WAL file's size in frames of `pageSize` bytes (rounded up; 0 when there is none).
    private func walFrames(_ directory: TemporaryDirectory, pageSize: Int) -> Int {
        let attributes = try? FileManager.default.attributesOfItem(atPath: directory.path("db.sqlite-wal"))
        let bytes = (attributes?[.size] as? Int) ?? 0
        return (bytes + pageSize + 23) / (pageSize + 24)
    }

    @Test("the WAL stays bounded by the writer's own checkpoint while many transactions commit")
    func walStaysBounded() throws {
        let directory = TemporaryDirectory()
        let (db, checkpointer) = try writer(directory, start: 20, inline: 100)
        let pageSize = Int(try db.pragmaInt("page_size"))
        let body = [UInt8](repeating: 7, count: 3 * pageSize)
        for batch in 0..<200 {
            try db.transaction { db in
                for row in 0..<5 { try db.run("INSERT INTO t(x, body) VALUES (?, ?)", .integer(Int64(batch * 5 + row)), .blob(body)) }
            }
        }
        checkpointer.waitUntilIdle()
        // The file never shrinks, so its size is the largest the WAL ever was: the writer's limit
        // plus the transaction that crossed it (5 rows of 4 pages and a few interior pages) and,
        // when the background held the checkpoint lock then, the next one.
        let transactionFramesMax = 5 * 4 + 8
        #expect(walFrames(directory, pageSize: pageSize) <= 100 + 2 * transactionFramesMax)
        // 4,000 pages went through a WAL of at most ~150: it was checkpointed and restarted.
        #expect(try db.scalarInt("SELECT count(*) FROM t") == 1000)
    }

    @Test("documents written with background checkpoints are all there after reopening")
    func documentsSurviveReopen() throws {
        let test = try TestStore(.init(checkpointInBackground: true))
        let text = String(repeating: "y", count: 2_000)
        for start in stride(from: 0, to: 3_000, by: 500) {
            _ = try test.store.putBatch((start..<start + 500).map {
                LocalWrite(documentID: "doc-\($0)", body: body($0, text), replacing: nil)
            })
        }
        let reopened = try test.reopen()
        for n in [0, 1_499, 2_999] {
            #expect(try reopened.get(id: "doc-\(n)").body == body(n, text))
        }
        #expect(try reopened.documentCount == 3_000)
    }
}
