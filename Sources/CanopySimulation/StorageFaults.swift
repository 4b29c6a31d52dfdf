import CanopyStore
import Foundation

/// A node's database files as a killed process leaves them on disk: the database file and its
/// WAL, byte for byte, without the shared-memory index (`-shm`), which SQLite rebuilds from the
/// WAL when the restarted process opens the file. A killed process does not close its
/// connections, so nothing is checkpointed or truncated on the way down: the restart recovers
/// the WAL, as a real restart after `kill -9` does.
struct CrashImage {
    var database: [UInt8]
    var wal: [UInt8]?

    /// The files at `path` as they are now (between two transactions they hold exactly the
    /// committed ones; SQLite writes them before a COMMIT returns).
    static func capture(path: String) throws -> CrashImage {
        CrashImage(database: try read(path), wal: try? read(path + "-wal"))
    }

    static func read(_ path: String) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
    }

    /// Writes the files at `path` (which must not be open).
    func write(to path: String) throws {
        try Data(database).write(to: URL(fileURLWithPath: path))
        if let wal { try Data(wal).write(to: URL(fileURLWithPath: path + "-wal")) }
    }
}

/// SQLite's WAL file format (https://www.sqlite.org/fileformat2.html#walformat), as far as a
/// torn commit needs it: a 32-byte header (magic, version, page size, checkpoint sequence, two
/// salts, a checksum of the header), then frames of a 24-byte header (page number, database size
/// in pages for the last frame of a commit and 0 otherwise, the salts, a running checksum) and one
/// page. Recovery keeps the frames up to the last commit frame whose salts match the header and
/// whose running checksum verifies; everything after it is ignored.
enum WALFormat {
    static let headerBytes = 32
    static let frameHeaderBytes = 24

    /// Where a valid commit frame starts, and the salts of the WAL it belongs to.
    struct Commit: Equatable {
        let frameOffset: Int
        let frameBytes: Int
        let salts: UInt64
    }

    /// The last frame that recovery would keep as a commit, or nil (no WAL, a bad header, or no
    /// valid commit): the same walk as SQLite's `walIndexRecover`.
    static func lastValidCommit(_ wal: [UInt8]) -> Commit? {
        guard wal.count >= headerBytes else { return nil }
        let magic = bigEndian(wal, 0)
        guard magic & 0xFFFF_FFFE == 0x377F_0682, bigEndian(wal, 4) == 3_007_000 else { return nil }
        let pageSize = Int(bigEndian(wal, 8))
        guard pageSize >= 512, pageSize <= 65536, pageSize & (pageSize - 1) == 0 else { return nil }
        let bigEndianWords = magic & 1 == 1
        var sum = checksum(wal[0..<24], bigEndianWords: bigEndianWords, from: (0, 0))
        guard sum.0 == bigEndian(wal, 24), sum.1 == bigEndian(wal, 28) else { return nil }
        let salts = (UInt64(bigEndian(wal, 16)) << 32) | UInt64(bigEndian(wal, 20))
        let frameBytes = frameHeaderBytes + pageSize
        var offset = headerBytes
        var last: Commit?
        while offset + frameBytes <= wal.count {
            let frameSalts = (UInt64(bigEndian(wal, offset + 8)) << 32) | UInt64(bigEndian(wal, offset + 12))
            guard frameSalts == salts, bigEndian(wal, offset) != 0 else { break }
            sum = checksum(wal[offset..<(offset + 8)], bigEndianWords: bigEndianWords, from: sum)
            sum = checksum(wal[(offset + frameHeaderBytes)..<(offset + frameBytes)], bigEndianWords: bigEndianWords, from: sum)
            guard sum.0 == bigEndian(wal, offset + 16), sum.1 == bigEndian(wal, offset + 20) else { break }
            if bigEndian(wal, offset + 4) != 0 { last = Commit(frameOffset: offset, frameBytes: frameBytes, salts: salts) }
            offset += frameBytes
        }
        return last
    }

    /// `wal` cut inside its last valid commit frame, `keep` bytes into it (1 ≤ keep < frame
    /// size): the file a process leaves when it dies while writing that frame. The commit's
    /// earlier frames stay, valid but with no commit frame after them, so recovery drops the whole
    /// transaction and keeps the commits before it. Nil when there is no valid commit to tear.
    static func tearLastCommit(_ wal: [UInt8], keep: Int) -> [UInt8]? {
        guard let commit = lastValidCommit(wal) else { return nil }
        precondition(keep >= 1 && keep < commit.frameBytes, "a torn frame keeps part of the frame")
        return Array(wal[0..<(commit.frameOffset + keep)])
    }

    private static func bigEndian(_ bytes: [UInt8], _ offset: Int) -> UInt32 {
        (UInt32(bytes[offset]) << 24) | (UInt32(bytes[offset + 1]) << 16) | (UInt32(bytes[offset + 2]) << 8) | UInt32(bytes[offset + 3])
    }

    /// SQLite's WAL checksum (`walChecksumBytes`) over `bytes` (a multiple of 8), continuing `sum`;
    /// the words are big-endian when the magic's low bit is set, little-endian otherwise.
    private static func checksum(_ bytes: ArraySlice<UInt8>, bigEndianWords: Bool, from sum: (UInt32, UInt32)) -> (UInt32, UInt32) {
        var (s1, s2) = sum
        var index = bytes.startIndex
        func word() -> UInt32 {
            let b = (UInt32(bytes[index]), UInt32(bytes[index + 1]), UInt32(bytes[index + 2]), UInt32(bytes[index + 3]))
            index += 4
            return bigEndianWords ? (b.0 << 24) | (b.1 << 16) | (b.2 << 8) | b.3 : (b.3 << 24) | (b.2 << 16) | (b.1 << 8) | b.0
        }
        while index < bytes.endIndex {
            let x0 = word()
            let x1 = word()
            s1 = s1 &+ x0 &+ s2
            s2 = s2 &+ x1 &+ s1
        }
        return (s1, s2)
    }
}

/// The storage faults of one simulated node (`Protocol/design.md` §7.1), as the store sees them
/// through its `StoreFaultInjector` hook, around the COMMIT of every write transaction:
///
///     I/O error    the next commit fails with SQLITE_IOERR (a failed write or fsync): the
///                  transaction rolls back, the write throws, the node goes on.
///     disk full    every commit fails with SQLITE_FULL until the disk has room again.
///     torn commit  the process dies inside its next commit: the commit's frames reached the WAL
///                  but the last one only in part. The node crashes at that instant with its
///                  files as the kill leaves them — the database file as it was before the COMMIT
///                  (only a checkpoint writes it, and a checkpoint comes after the commit frame)
///                  and the WAL cut inside the commit frame — and SQLite's recovery at restart
///                  drops the whole transaction, which nobody was told had committed.
///
/// Used on the simulation's thread only.
final class StorageFaults: StoreFaultInjector, @unchecked Sendable {
    /// SQLite result codes (sqlite3.h), so that this module needs no SQLite import.
    static let ioError: Int32 = 10
    static let ioErrorWrite: Int32 = 10 | (3 << 8)
    static let full: Int32 = 13

    private let clock: () -> Double
    /// The node's current database file.
    var path: () -> String = { "" }
    /// Fails the next commit with an I/O error.
    var failNextCommit = false
    /// Every commit fails with SQLITE_FULL until this time.
    var fullUntil: Double?
    /// The next commit tears: how much of its commit frame reaches the file (reduced modulo the
    /// frame size, so 1 byte to all but 1) and how long the node then stays down.
    struct TornCommit {
        let keep: Int
        let downSeconds: Double
    }

    /// Set when the next commit is to tear.
    var tearNextCommit: TornCommit?
    /// Called when the process dies inside a commit, with the files the kill leaves and the
    /// seconds until the node restarts.
    var died: (CrashImage, Double) -> Void = { _, _ in }
    /// Commits failed (I/O error, disk full) so far.
    private(set) var failedCommits = 0
    /// The files before the COMMIT of the transaction that tears.
    private var beforeTornCommit: CrashImage?

    init(clock: @escaping () -> Double) {
        self.clock = clock
    }

    /// Ends every fault (the heal).
    func disarm() {
        failNextCommit = false
        fullUntil = nil
        tearNextCommit = nil
        beforeTornCommit = nil
    }

    func beforeCommit() throws {
        if let until = fullUntil {
            if clock() < until {
                failedCommits += 1
                throw SQLiteError(code: Self.full, extendedCode: Self.full, message: "database or disk is full (simulated)", sql: "COMMIT")
            }
            fullUntil = nil
        }
        if failNextCommit {
            failNextCommit = false
            failedCommits += 1
            throw SQLiteError(code: Self.ioError, extendedCode: Self.ioErrorWrite, message: "disk I/O error (simulated)", sql: "COMMIT")
        }
        if tearNextCommit != nil { beforeTornCommit = try CrashImage.capture(path: path()) }
    }

    func afterCommit() throws {
        guard let torn = tearNextCommit, let before = beforeTornCommit else { return }
        tearNextCommit = nil
        beforeTornCommit = nil
        var image = before
        let wal = try? CrashImage.read(path() + "-wal")
        if let wal, let commit = WALFormat.lastValidCommit(wal), commit != before.wal.flatMap(WALFormat.lastValidCommit) {
            // The transaction wrote frames: its commit frame is the last valid one, and tears.
            image.wal = WALFormat.tearLastCommit(wal, keep: 1 + torn.keep % (commit.frameBytes - 1))
        }
        died(image, torn.downSeconds)
        throw Self.deadProcess
    }

    /// What a commit of the dead process "throws": its caller never returns in reality; here it
    /// is told the commit failed, and the node is already down.
    static let deadProcess = SQLiteError(
        code: ioError, extendedCode: ioErrorWrite, message: "the process died inside COMMIT (simulated)", sql: "COMMIT")

    /// The injector of one opening of the node's files (the store object of one process
    /// lifetime): it forwards to the node's faults while that process lives, and fails every
    /// commit after it died — a dead process's store object, still referenced by code on the
    /// stack of its death, writes nothing.
    final class Lifetime: StoreFaultInjector, @unchecked Sendable {
        private let faults: StorageFaults
        private let isAlive: () -> Bool

        init(_ faults: StorageFaults, isAlive: @escaping () -> Bool) {
            self.faults = faults
            self.isAlive = isAlive
        }

        func beforeCommit() throws {
            guard isAlive() else { throw StorageFaults.deadProcess }
            try faults.beforeCommit()
        }

        func afterCommit() throws {
            if isAlive() { try faults.afterCommit() }
        }
    }
}
