import CSQLite

/// What a passive WAL checkpoint did.
struct WALCheckpointResult: Sendable, Equatable {
    /// Frames in the WAL when it ran.
    let walFrames: Int
    /// Frames of the WAL now copied into the database file (all of them when the two are equal).
    let checkpointedFrames: Int
}

/// Receives the WAL size after every commit on a connection whose automatic checkpoints it
/// replaced (`Database.replaceAutomaticCheckpoints`). Runs on the committing thread, inside the
/// commit: it must be quick and may only checkpoint that same connection.
protocol WALCommitObserver: AnyObject {
    func committed(_ database: Database, walFrames: Int)
}

extension Database {
    /// Copies every committed WAL frame that no reader still needs into the database file,
    /// without waiting for or blocking writers (`SQLITE_CHECKPOINT_PASSIVE`); the WAL is synced
    /// before the copy and the database file after it, as in SQLite's automatic checkpoints.
    /// Returns nil when another connection's checkpoint is running.
    func checkpointPassive() throws(SQLiteError) -> WALCheckpointResult? {
        var walFrames: Int32 = 0
        var checkpointedFrames: Int32 = 0
        let result = sqlite3_wal_checkpoint_v2(connection, nil, SQLITE_CHECKPOINT_PASSIVE, &walFrames, &checkpointedFrames)
        if result == SQLITE_BUSY { return nil }
        guard result == SQLITE_OK else { throw SQLiteError(result: result, connection: connection, sql: nil) }
        return WALCheckpointResult(walFrames: Int(walFrames), checkpointedFrames: Int(checkpointedFrames))
    }

    /// Turns off SQLite's automatic checkpoint at commit (`wal_autocheckpoint`, itself a WAL
    /// hook) and reports every commit's WAL size to `observer` instead, which then owns keeping
    /// the WAL bounded. The connection keeps `observer` alive.
    func replaceAutomaticCheckpoints(with observer: any WALCommitObserver) {
        walObserver = observer
        let context = Unmanaged.passUnretained(self).toOpaque()
        sqlite3_wal_hook(connection, { context, _, _, frames in
            guard let context else { return SQLITE_OK }
            let database = Unmanaged<Database>.fromOpaque(context).takeUnretainedValue()
            database.walObserver?.committed(database, walFrames: Int(frames))
            return SQLITE_OK
        }, context)
    }
}
