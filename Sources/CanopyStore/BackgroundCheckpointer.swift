import Dispatch
import Foundation
import Logging

/// Takes WAL checkpoints off the writer's critical path. SQLite's automatic checkpoint runs inside
/// the commit that crosses `wal_autocheckpoint` pages: the writer copies the WAL into the database
/// file and waits for two `fdatasync`s while holding the store — about a sixth of a receiving
/// agent's busy time during a large replication. Here a second connection, on its own queue, runs
/// passive checkpoints instead: they copy committed frames while the writer goes on appending.
///
/// A passive checkpoint never completes while commits keep arriving, and SQLite restarts the WAL
/// from its beginning only after a complete one, so the writer still checkpoints itself once the
/// WAL reaches `inlineFrames`: by then the background has copied (and synced) nearly all of it,
/// so the writer's own checkpoint is short, and the WAL restarts at the next commit.
///
/// A passive checkpoint that does not reach the end of the WAL (the usual case while a replication
/// writes) copies frames into the database file but does not sync it: SQLite syncs the database
/// only in the checkpoint that catches up, which is the writer's own. That left the writer to
/// flush every page the background had copied since the last restart — 16–18 ms of `fdatasync`
/// per 32 MiB, during which the receiving agent's session waited and both agents idled. So the
/// background syncs the database file itself after each checkpoint (`databaseFile`, a read-only
/// descriptor of the same file): the writer's sync then flushes only what the background copied
/// last. An extra sync never weakens durability.
///
/// Invariants: `connection` and `databaseFile` are used only on `queue`; at most one background
/// checkpoint is queued or running (`scheduled`), and only the writer's commits queue one; the WAL
/// holds at most `inlineFrames` frames plus the transaction that crossed it; a checkpoint is only
/// ever SQLite's own, so durability is SQLite's (the checkpointing connection has the writer's
/// `synchronous`).
final class BackgroundCheckpointer: WALCommitObserver, @unchecked Sendable {
    private let connection: Database
    private let queue = DispatchQueue(label: "canopy.store.checkpoint", qos: .utility)
    private let logger: Logger
    private let startFrames: Int
    private let inlineFrames: Int
    /// The database file, opened read-only for `fdatasync`; -1 if it could not be opened (then
    /// the writer's checkpoint syncs everything, as SQLite alone would).
    private let databaseFile: Int32
    private let lock = NSLock()
    /// True from the request of a background checkpoint until it finished. Under `lock`.
    private var scheduled = false
    /// WAL frames known to be in the database file. Under `lock`.
    private var checkpointedFrames = 0

    /// Opens the checkpointing connection to the database at `path`. Attach it to the writer
    /// with `Database.replaceAutomaticCheckpoints(with:)`.
    init(path: String, durable: Bool, logger: Logger,
         startFrames: Int = StoreLimits.walBackgroundCheckpointFrames,
         inlineFrames: Int = StoreLimits.walInlineCheckpointFrames) throws(SQLiteError) {
        precondition(0 < startFrames && startFrames < inlineFrames, "checkpoint thresholds out of order")
        connection = try Database(path: path, durable: durable)
        // It reads nothing through the page cache: a checkpoint copies frames file to file.
        try connection.execute("PRAGMA cache_size=16")
        databaseFile = open(path, O_RDONLY | O_CLOEXEC)
        self.logger = logger
        self.startFrames = startFrames
        self.inlineFrames = inlineFrames
    }

    deinit {
        if databaseFile >= 0 { close(databaseFile) }
    }

    /// After every commit, on the writer's thread, inside the commit.
    func committed(_ writer: Database, walFrames: Int) {
        if walFrames >= inlineFrames {
            checkpointInline(writer)
            return
        }
        lock.lock()
        // Fewer frames than already copied: the WAL restarted from its beginning.
        if walFrames < checkpointedFrames { checkpointedFrames = 0 }
        let start = !scheduled && walFrames - checkpointedFrames >= startFrames
        if start { scheduled = true }
        lock.unlock()
        if start { queue.async { [self] in checkpointInBackground() } }
    }

    /// The writer finishes what the background copied: everything committed reaches the
    /// database file, so the next commit restarts the WAL. While a background checkpoint runs
    /// (SQLite allows one at a time) the writer waits for it — the background, done, has left
    /// little to copy — rather than let the WAL grow past its bound.
    private func checkpointInline(_ writer: Database) {
        do {
            var result = try writer.checkpointPassive()
            if result == nil {
                waitUntilIdle()
                result = try writer.checkpointPassive()
            }
            guard let result else { return }
            lock.lock()
            checkpointedFrames = result.checkpointedFrames
            lock.unlock()
        } catch {
            logger.warning("WAL checkpoint failed", metadata: ["error": "\(error)"])
        }
    }

    private func checkpointInBackground() {
        var result: WALCheckpointResult?
        do {
            result = try connection.checkpointPassive()
        } catch {
            logger.warning("background WAL checkpoint failed", metadata: ["error": "\(error)"])
        }
        if let result, result.checkpointedFrames > 0, databaseFile >= 0, fdatasync(databaseFile) != 0 {
            logger.warning(
                "syncing the database file after a background checkpoint failed", metadata: ["errno": "\(errno)"])
        }
        lock.lock()
        scheduled = false
        if let result { checkpointedFrames = result.checkpointedFrames }
        lock.unlock()
    }

    /// Waits until no background checkpoint is queued or running (tests, and closing).
    func waitUntilIdle() {
        queue.sync {}
    }
}
