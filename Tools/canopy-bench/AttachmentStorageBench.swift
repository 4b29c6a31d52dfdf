import ArgumentParser
import CSQLite
import CSodium
import CanopyCore
import CanopyCrypto
import CanopyStore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// `canopy-bench attachment-storage`: where a node keeps attachment content, measured. The same
/// bytes are stored and read back two ways, each hashed as it streams (the digest names the
/// content), beside ceilings measured in the same run:
///
/// - **hashing**: BLAKE2b-256 and SHA-256 (libsodium) over the same buffer, in memory;
/// - **disk**: plain `write` of the bytes into one file, then `fsync`; reading it back;
/// - **files**: hash while writing a temporary file in the directory, `fsync`, rename to the
///   digest's name (what a node would do for each attachment);
/// - **chunk table**: hash while inserting `--chunk-kib` chunks into a `WITHOUT ROWID` table of
///   a WAL database, committing every `--commit-mib` (the chunks are invisible until a revision
///   names their digest, so they need not share one transaction), then a TRUNCATE checkpoint
///   (the WAL copy is part of the cost).
struct AttachmentStorageBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attachment-storage",
        abstract: "Attachment content as files or as a SQLite chunk table: MB/s written and read, beside disk and hash ceilings.")

    @Option(help: "MiB of content per measurement.")
    var mebibytes = 1024

    @Option(name: .customLong("chunk-kib"), help: "KiB per chunk-table row.")
    var chunkKiB = 256

    @Option(name: .customLong("commit-mib"), help: "MiB between commits of the chunk table.")
    var commitMiB = 16

    @Option(help: "Directory to measure in (default: a new one under the temporary directory).")
    var directory: String?

    @Flag(help: "Print the figures as JSON.")
    var json = false

    func run() throws {
        Sodium.ensureInitialized()
        let base = directory ?? (NSTemporaryDirectory() + "canopy-attachment-bench-\(getpid())")
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        defer { if directory == nil { try? FileManager.default.removeItem(atPath: base) } }
        let total = mebibytes << 20
        var block = [UInt8](repeating: 0, count: 1 << 20)
        randombytes_buf(&block, block.count)

        let blake = Self.time { _ = Self.blake2b(block, repeated: mebibytes) }
        let sha = Self.time { _ = Self.sha256(block, repeated: mebibytes) }
        var figures = [
            Self.figure("hash BLAKE2b-256, in memory", total, blake, ceiling: nil),
            Self.figure("hash SHA-256, in memory", total, sha, ceiling: blake, ceilingName: "BLAKE2b-256"),
        ]

        let plain = base + "/plain"
        let diskWrite = try Self.time { try Self.writeFile(plain, block, repeated: mebibytes, hashing: false) }
        let diskRead = try Self.time { _ = try Self.readFile(plain, hashing: false) }
        figures.append(Self.figure("disk: write + fsync one file", total, diskWrite, ceiling: nil))
        figures.append(Self.figure("disk: read one file", total, diskRead, ceiling: nil))
        try FileManager.default.removeItem(atPath: plain)

        let files = base + "/attachments"
        try FileManager.default.createDirectory(atPath: files, withIntermediateDirectories: true)
        var digest = ""
        let fileWrite = try Self.time {
            let temporary = files + "/incoming.tmp"
            digest = try Self.writeFile(temporary, block, repeated: mebibytes, hashing: true)
            guard rename(temporary, files + "/" + digest) == 0 else { throw SystemCallFailed(call: "rename") }
        }
        var readDigest = ""
        let fileRead = try Self.time { readDigest = try Self.readFile(files + "/" + digest, hashing: true) }
        precondition(readDigest == digest, "the file read back hashes to another digest")
        figures.append(Self.figure("files: hash + write + fsync + rename", total, fileWrite, ceiling: diskWrite, ceilingName: "disk write"))
        figures.append(Self.figure("files: read + verify the digest", total, fileRead, ceiling: blake, ceilingName: "BLAKE2b-256"))
        try FileManager.default.removeItem(atPath: files)

        let database = try Database(path: base + "/chunks.sqlite")
        try database.execute("CREATE TABLE chunks (digest BLOB NOT NULL, n INTEGER NOT NULL, bytes BLOB NOT NULL, PRIMARY KEY (digest, n)) WITHOUT ROWID")
        let key = [UInt8](repeating: 0xAB, count: 32)
        let chunk = chunkKiB << 10
        let perCommit = max(1, (commitMiB << 20) / chunk)
        let chunkWrite = try Self.time {
            let state = Blake2bStream()
            var index = 0
            let chunks = total / chunk
            while index < chunks {
                try database.transaction { db in
                    let insert = try db.cached("INSERT INTO chunks (digest, n, bytes) VALUES (?, ?, ?)")
                    for _ in 0..<min(perCommit, chunks - index) {
                        let offset = (index * chunk) % block.count
                        let bytes = Array(block[offset..<offset + chunk])
                        state.update(bytes)
                        try insert.bound(.blob(key), .integer(Int64(index)), .blob(bytes)).run()
                        index += 1
                    }
                }
            }
            _ = state.finish()
            try database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        }
        let chunkRead = try Self.time {
            let state = Blake2bStream()
            let select = try database.cached("SELECT bytes FROM chunks WHERE digest = ? ORDER BY n")
            try select.bind(.blob(key), at: 1)
            while try select.step() { state.update(select.borrowedBlob(0)) }
            select.reset()
            _ = state.finish()
        }
        figures.append(Self.figure(
            "chunk table: hash + insert \(chunkKiB) KiB rows, commit every \(commitMiB) MiB, checkpoint", total, chunkWrite,
            ceiling: diskWrite, ceilingName: "disk write"))
        figures.append(Self.figure("chunk table: select + verify the digest", total, chunkRead, ceiling: blake, ceilingName: "BLAKE2b-256"))
        FigureReport.print(figures, json: json)
    }

    struct SystemCallFailed: Error, CustomStringConvertible {
        var call: String
        var description: String { "\(call) failed: errno \(errno)" }
    }

    static func blake2b(_ block: [UInt8], repeated count: Int) -> [UInt8] {
        let state = Blake2bStream()
        for _ in 0..<count { state.update(block) }
        return state.finish()
    }

    static func hex(_ digest: [UInt8]) -> String { digest.map { String(format: "%02x", $0) }.joined() }

    static func sha256(_ block: [UInt8], repeated count: Int) -> [UInt8] {
        var state = crypto_hash_sha256_state()
        crypto_hash_sha256_init(&state)
        for _ in 0..<count { crypto_hash_sha256_update(&state, block, UInt64(block.count)) }
        var digest = [UInt8](repeating: 0, count: 32)
        crypto_hash_sha256_final(&state, &digest)
        return digest
    }

    /// Writes `block` `count` times to a new file at `path` and syncs it; returns the content's
    /// BLAKE2b-256 in hex when hashing (empty otherwise).
    @discardableResult
    static func writeFile(_ path: String, _ block: [UInt8], repeated count: Int, hashing: Bool) throws -> String {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw SystemCallFailed(call: "open") }
        defer { close(fd) }
        let state = Blake2bStream()
        for _ in 0..<count {
            if hashing { state.update(block) }
            let written = block.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard written == block.count else { throw SystemCallFailed(call: "write") }
        }
        guard fsync(fd) == 0 else { throw SystemCallFailed(call: "fsync") }
        return hashing ? hex(state.finish()) : ""
    }

    /// Reads the file at `path` in 1 MiB blocks; returns its BLAKE2b-256 in hex when hashing.
    static func readFile(_ path: String, hashing: Bool) throws -> String {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { throw SystemCallFailed(call: "open") }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        let state = Blake2bStream()
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard count >= 0 else { throw SystemCallFailed(call: "read") }
            if count == 0 { break }
            if hashing { state.update(buffer[..<count]) }
        }
        return hashing ? hex(state.finish()) : ""
    }

    static func time(_ body: () throws -> Void) rethrows -> Double {
        let start = DispatchTime.now().uptimeNanoseconds
        try body()
        return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    }

    /// A rate in MB/s of `bytes` in `seconds`, beside the rate of `ceiling` seconds.
    static func figure(_ name: String, _ bytes: Int, _ seconds: Double, ceiling: Double?, ceilingName: String? = nil) -> Figure {
        let rate = { (seconds: Double) in Double(bytes) / seconds / 1e6 }
        return Figure(name: name, value: rate(seconds), unit: "MB/s", ceiling: ceiling.map(rate), ceilingName: ceilingName)
    }
}
