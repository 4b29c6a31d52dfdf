import ArgumentParser
import CanopyAdmin
import CanopyAgent
import CanopyCore
import CanopyReplication
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Where `canopyd` and `canopyctl` are: next to this tool unless `--bin-dir` says otherwise.
struct Binaries {
    let canopyd: String
    let canopyctl: String

    init(directory: String?) throws {
        let base =
            directory
            ?? URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
            .deletingLastPathComponent().path
        canopyd = base + "/canopyd"
        canopyctl = base + "/canopyctl"
        for path in [canopyd, canopyctl] where !FileManager.default.isExecutableFile(atPath: path) {
            throw ValidationError(
                "no \(path): build it (swift build -c release --product canopyd --product canopyctl) or pass --bin-dir")
        }
    }
}

/// One real `canopyd` on a data directory of its own, listening on a fixed loopback port (so it
/// comes back on the same address after a kill), with its log in a file beside the directory.
///
/// Invariant: a started process is registered with `Cleanup` until it has exited, so the tool never
/// leaves an agent running, whatever ends it. Only the experiment's own thread starts and stops the
/// process; writer and probe threads use the immutable members (paths, binaries), hence Sendable.
final class TortureAgent: @unchecked Sendable {
    static let startLimitSeconds = 60.0

    let name: String
    let dataDir: String
    let logPath: String
    let port: UInt16
    let nodeID: String
    let binaries: Binaries
    private var process: Process?

    var address: String { "127.0.0.1:\(port)" }
    var socketPath: String { dataDir + "/admin.sock" }
    var databasePath: String { dataDir + "/canopy.sqlite" }
    var pid: Int32? { process.map(\.processIdentifier) }
    var isRunning: Bool { process?.isRunning ?? false }

    /// `canopyd init` in `dataDir` on a free port.
    init(name: String, dataDir: String, logDirectory: String, binaries: Binaries) throws {
        self.name = name
        self.dataDir = dataDir
        self.binaries = binaries
        logPath = logDirectory + "/\(name).log"
        port = try Ports.free()
        let result = try runCommand(binaries.canopyd, ["init", "--data-dir", dataDir, "--listen", "127.0.0.1:\(port)"])
        guard result.status == 0, let last = result.stdout.split(separator: "\n").last else {
            throw ExperimentFailure("canopyd init \(dataDir) failed (\(result.status)): \(result.stderr)")
        }
        nodeID = String(last)
    }

    /// An agent on an existing data directory (a copy), given a free port of its own with `--listen`.
    init(name: String, existing dataDir: String, logDirectory: String, binaries: Binaries) throws {
        self.name = name
        self.dataDir = dataDir
        self.binaries = binaries
        logPath = logDirectory + "/\(name).log"
        port = try Ports.free()
        let result = try runCommand(binaries.canopyd, ["id", "--data-dir", dataDir])
        guard result.status == 0, let last = result.stdout.split(separator: "\n").last else {
            throw ExperimentFailure("canopyd id \(dataDir) failed (\(result.status)): \(result.stderr)")
        }
        nodeID = String(last)
    }

    /// Starts `canopyd run` without waiting for it (its output appended to the log file).
    func launch(logLevel: String = "info") throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binaries.canopyd)
        process.arguments = ["run", "--data-dir", dataDir, "--listen", address, "--log-level", logLevel]
        if !FileManager.default.fileExists(atPath: logPath) { _ = FileManager.default.createFile(atPath: logPath, contents: nil) }
        guard let log = FileHandle(forWritingAtPath: logPath) else { throw ExperimentFailure("cannot open \(logPath)") }
        log.seekToEndOfFile()
        process.standardOutput = log
        process.standardError = log
        process.standardInput = FileHandle(forReadingAtPath: "/dev/null")
        try process.run()
        try? log.close()
        Cleanup.shared.add(pid: process.processIdentifier)
        self.process = process
    }

    /// How a start ended: serving, or exited with a status.
    enum StartOutcome {
        case serving
        case exited(status: Int32)
    }

    /// Starts the agent and waits until its admin socket answers or it exits.
    @discardableResult
    func start(logLevel: String = "info") throws -> StartOutcome {
        try launch(logLevel: logLevel)
        return try waitServing()
    }

    /// Waits until the launched agent answers `status` on its admin socket, or has exited.
    func waitServing() throws -> StartOutcome {
        guard let process else { throw ExperimentFailure("\(name) was never launched") }
        var outcome: StartOutcome?
        _ = waitUntil(limit: Self.startLimitSeconds, interval: 0.002) {
            if !process.isRunning {
                process.waitUntilExit()
                Cleanup.shared.remove(pid: process.processIdentifier)
                outcome = .exited(status: process.terminationStatus)
                return true
            }
            if succeeds(Admin.Status()) { outcome = .serving }
            return outcome != nil
        }
        guard let outcome else {
            throw ExperimentFailure("\(name) neither served nor exited in \(Self.startLimitSeconds) s; log \(logPath)")
        }
        return outcome
    }

    /// Starts the agent and fails unless it serves.
    func startServing() throws {
        if case .exited(let status) = try start() {
            throw ExperimentFailure("\(name) exited with status \(status) at start: \(logTail())")
        }
    }

    /// SIGKILL, then waits for the process to be gone.
    func kill9() {
        guard let process, process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        Cleanup.shared.remove(pid: process.processIdentifier)
    }

    /// A clean stop (admin `shutdown`, then SIGTERM), SIGKILL if the agent has not exited after
    /// `limit` seconds. Returns the exit status.
    @discardableResult
    func stop(limit: Double = 40) -> Int32? {
        guard let process else { return nil }
        if process.isRunning {
            if !succeeds(Admin.Shutdown()) { kill(process.processIdentifier, SIGTERM) }
            if !waitUntil(limit: limit, { !process.isRunning }) { kill(process.processIdentifier, SIGKILL) }
        }
        process.waitUntilExit()
        Cleanup.shared.remove(pid: process.processIdentifier)
        return process.terminationStatus
    }

    /// A new admin connection whose reads give up after `timeout` seconds.
    func client(timeout: Double = 60) throws -> AdminSocketClient {
        try AdminSocketClient(path: socketPath, receiveTimeoutSeconds: timeout)
    }

    /// `command` on `client` (a new connection when nil); its reply, or a failure unless the agent
    /// answers with success.
    @discardableResult
    func call<C: AdminCommand>(_ command: C, on client: AdminSocketClient? = nil) throws -> C.Reply {
        switch try (client ?? self.client()).call(command) {
        case .success(let answer): return answer.reply
        case .failure(let failure): throw ExperimentFailure("\(name): \(C.name) failed: \(failure)")
        }
    }

    /// True when the agent answers `command` with success, on a new connection whose reads give
    /// up after `timeout` seconds.
    func succeeds<C: AdminCommand>(_ command: C, timeout: Double = 5) -> Bool {
        guard case .success? = try? client(timeout: timeout).call(command) else { return false }
        return true
    }

    /// Runs `canopyctl --data-dir DIR ARGUMENTS`.
    func ctl(_ arguments: [String], limit: Double = 60) throws -> CommandResult {
        try runCommand(binaries.canopyctl, ["--data-dir", dataDir] + arguments, limit: limit)
    }

    /// Allows `other` (dialling it at its address unless `dial` is false).
    func allow(
        _ other: TortureAgent, dial: Bool = true, direction: ReplicationDirection = .both, mode: ReplicationMode = .continuous
    ) throws {
        try call(Admin.AddPeer(.init(nodeID: other.nodeID, address: dial ? other.address : "-", direction: direction, mode: mode)))
    }

    /// The peer table row for `nodeID`.
    func peerRow(_ nodeID: String, client: AdminSocketClient? = nil) throws -> Admin.PeerStatus? {
        try call(Admin.Peers(), on: client).peers.first { $0.nodeID == nodeID }
    }

    /// `stats.doc_count` (-1 when the agent does not answer).
    func documentCount() -> Int {
        guard let stats = try? call(Admin.Stats(), on: client(timeout: 30)) else { return -1 }
        return Int(stats.counts.docCount)
    }

    /// `canopyctl check` found the database sound.
    func checkSound() throws -> Bool {
        let result = try ctl(["check", "--json"], limit: 120)
        guard let value = try? JSONValue.parse(result.stdout), let check = try? JSONValueDecoder().decode(Admin.Check.Reply.self, from: value)
        else { return false }
        return result.status == 0 && check.sound
    }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Lines in the log so far.
    var logLineCount: Int { log.split(separator: "\n").count }

    /// The last lines of the log, for failure messages.
    func logTail(_ lines: Int = 5) -> String { log.split(separator: "\n").suffix(lines).joined(separator: " | ") }

    /// Resident memory now (VmRSS) in bytes, 0 when the process is gone.
    var residentBytes: Int { pid.map(Self.residentBytes) ?? 0 }

    static func residentBytes(_ pid: Int32) -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kilobytes = line.split(separator: " ").dropFirst().first.flatMap({ Int($0) })
        else { return 0 }
        return kilobytes * 1024
    }

    deinit {
        if let process, process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            Cleanup.shared.remove(pid: process.processIdentifier)
        }
    }
}

extension TortureAgent {
    /// Agents `a` and `b` in `directory` (a's data directory at `aDataDir` when given), started, each
    /// allowing and dialling the other: continuous replication both ways.
    static func replicatingPair(in directory: String, aDataDir: String? = nil, binaries: Binaries) throws -> (
        TortureAgent, TortureAgent
    ) {
        let a = try TortureAgent(name: "a", dataDir: aDataDir ?? directory + "/a", logDirectory: directory, binaries: binaries)
        let b = try TortureAgent(name: "b", dataDir: directory + "/b", logDirectory: directory, binaries: binaries)
        try a.startServing()
        try b.startServing()
        try a.allow(b)
        try b.allow(a)
        return (a, b)
    }
}
