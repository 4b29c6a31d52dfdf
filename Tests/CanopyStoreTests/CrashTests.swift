import CanopyTestSupport
import CanopyCore
import Foundation
import Testing
@testable import CanopyStore

#if canImport(Glibc)
import Glibc
#endif

@Suite("Durability under SIGKILL")
struct CrashTests {
    /// Documents per batch written by the child (must match what the verification expects).
    static let batchSize = 20
    /// Kills per test run: enough to hit every phase of a commit many times, under 20 s in all.
    static let kills = 30

    /// `canopy-crashtest`, built next to the test bundle (it is a dependency of this target).
    static func crashtestExecutable() throws -> URL {
        var candidates: [URL] = [Bundle.main.bundleURL]
        if let executable = Bundle.main.executableURL { candidates.append(executable.deletingLastPathComponent()) }
        candidates.append(URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent())
        for directory in candidates {
            let url = directory.appendingPathComponent("canopy-crashtest")
            if FileManager.default.isExecutableFile(atPath: url.path) { return url }
        }
        throw CrashTestError.executableNotFound(candidates.map(\.path))
    }

    enum CrashTestError: Error {
        case executableNotFound([String])
        case childFailed(String)
    }

    @Test("a writer killed with SIGKILL at random points loses no committed batch and leaves no partial one")
    func killedWriterLosesNothing() throws {
        let executable = try Self.crashtestExecutable()
        let directory = TemporaryDirectory()
        let path = directory.path("crash.sqlite")
        var random = SplitMix64(seed: 0x5EED_C0DE)
        var committed: Set<String> = []
        for run in 0..<Self.kills {
            // 0 kills the child while it opens (or creates) the file; larger values mid-stream.
            let linesBeforeKill = Int(random.next(below: 10))
            let tag = "r\(run)"
            let seen = try Self.runAndKill(executable, path: path, tag: tag, linesBeforeKill: linesBeforeKill)
            committed.formUnion(seen.map { "\(tag)/\($0)" })
            try Self.verify(path: path, committed: committed)
        }
        #expect(!committed.isEmpty)
    }

    /// Starts the child, reads `linesBeforeKill` lines, kills it with SIGKILL, and returns the
    /// batch numbers of every "committed N" line it printed before dying.
    static func runAndKill(_ executable: URL, path: String, tag: String, linesBeforeKill: Int) throws -> [Int] {
        let process = ChildProcess()
        process.executableURL = executable
        process.arguments = [path, tag, "100000", String(batchSize)]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let reader = LineReader(output.fileHandleForReading)
        var lines: [String] = []
        while lines.count < linesBeforeKill, let line = reader.nextLine() { lines.append(line) }
        kill(process.processIdentifier, SIGKILL)
        while let line = reader.nextLine() { lines.append(line) }
        process.waitUntilExit()
        return try lines.map { line in
            guard line.hasPrefix("committed "), let batch = Int(line.dropFirst("committed ".count)) else {
                throw CrashTestError.childFailed(line)
            }
            return batch
        }
    }

    /// Opens the file as a restarted node would and checks it.
    static func verify(path: String, committed: Set<String>) throws {
        let store = try DocumentStore(path: path)
        #expect(try store.integrityCheck() == "ok")
        var documentsPerBatch: [String: Int] = [:]
        for change in try store.changes(since: 0) {
            let batch = change.documentID.split(separator: "/").prefix(2).joined(separator: "/")
            documentsPerBatch[batch, default: 0] += 1
        }
        for (batch, count) in documentsPerBatch.sorted(by: { $0.key < $1.key }) {
            #expect(count == batchSize, "batch \(batch) is partial: \(count) of \(batchSize) documents")
        }
        for batch in committed.sorted() {
            #expect(documentsPerBatch[batch] == batchSize, "committed batch \(batch) is missing")
        }
        if let sample = committed.sorted().last {
            let document = try store.get(id: "\(sample)/\(batchSize - 1)")
            #expect(document.body.objectValue?["index"] == .int(Int64(batchSize - 1)))
        }
    }
}

/// Reads lines from a pipe, blocking until a line or end of file arrives.
final class LineReader {
    private let handle: FileHandle
    private var buffer: [UInt8] = []
    private var atEnd = false

    init(_ handle: FileHandle) { self.handle = handle }

    /// The next complete line, or nil at end of file (a partial last line is dropped: the child
    /// died while printing it, so its commit was not announced).
    func nextLine() -> String? {
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffer[..<newline], as: UTF8.self)
                buffer.removeSubrange(...newline)
                return line
            }
            if atEnd { return nil }
            let data = handle.availableData
            if data.isEmpty { atEnd = true } else { buffer.append(contentsOf: data) }
        }
    }
}
