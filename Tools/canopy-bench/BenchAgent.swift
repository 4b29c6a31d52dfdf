import ArgumentParser
import CanopyAdmin
import CanopyAgent
import CanopyCore
import CanopyStore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// One real `canopyd` child process on a fresh data directory under a temporary directory, driven
/// through its admin socket: what `replicate`, `latency` and `scale` measure.
///
/// Invariants: the data directory is initialised by `canopyd init` before anything else; the
/// process, once started, is stopped (admin `shutdown`, then SIGKILL after `stopWaitSeconds`) by
/// `stop()` or at the latest by `deinit`, so a failed benchmark leaves no agent running.
final class BenchAgent {
    /// How long any wait for the agent (start, stop) may take before the benchmark gives up.
    static let stopWaitSeconds = 30.0

    let name: String
    let dataDir: String
    let nodeID: String
    private let executable: String
    private var process = Process()
    private let logPath: String

    /// `canopyd init` in `parent/name` (listening on a free loopback port). Does not start it.
    init(name: String, parent: String, canopyd: String) throws {
        self.name = name
        self.executable = canopyd
        dataDir = parent + "/" + name
        logPath = parent + "/" + name + ".log"
        let output = try Self.runToEnd(canopyd, ["init", "--data-dir", dataDir, "--listen", "127.0.0.1:0"])
        guard let last = output.split(separator: "\n").last else { throw ValidationError("canopyd init printed no node id") }
        nodeID = String(last)
    }

    /// Sets the `[limits]` batch size and window in the agent's config file (before `start`).
    func setLimits(batchRevisions: Int?, batchesInFlight: Int?) throws {
        let path = dataDir + "/canopy.conf"
        var lines = try String(contentsOfFile: path, encoding: .utf8).components(separatedBy: "\n")
        for (index, line) in lines.enumerated() {
            if let batchRevisions, line.hasPrefix("batch-revisions") { lines[index] = "batch-revisions = \(batchRevisions)" }
            if let batchesInFlight, line.hasPrefix("batches-in-flight") { lines[index] = "batches-in-flight = \(batchesInFlight)" }
        }
        try lines.joined(separator: "\n").write(toFile: path, atomically: true, encoding: .utf8)
    }

    /// Appends sections (`[rule NAME]`, …) to the agent's config file (before `start`).
    func appendConfig(_ text: String) throws {
        let path = dataDir + "/canopy.conf"
        let original = try String(contentsOfFile: path, encoding: .utf8)
        try (original + "\n" + text).write(toFile: path, atomically: true, encoding: .utf8)
    }

    /// The agent's database file, for loading documents before it starts.
    var databasePath: String { dataDir + "/canopy.sqlite" }

    /// Starts `canopyd run` and waits until its admin socket answers.
    func start() throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["run", "--data-dir", dataDir, "--log-level", "warning"]
        guard FileManager.default.createFile(atPath: logPath, contents: nil), let log = FileHandle(forWritingAtPath: logPath) else {
            throw ValidationError("cannot create the agent's log file \(logPath)")
        }
        process.standardOutput = log
        process.standardError = log
        try process.run()
        try waitUntil("\(name)'s admin socket") {
            guard process.isRunning else { throw ValidationError("canopyd \(name) exited; see \(logPath)") }
            guard case .success? = try? client().call(Admin.Status()) else { return false }
            return true
        }
    }

    /// A new admin connection.
    func client() throws -> AdminSocketClient { try AdminSocketClient(path: dataDir + "/admin.sock") }

    /// Sends `command` on a new connection and returns its reply; fails unless it succeeds.
    @discardableResult
    func call<C: AdminCommand>(_ command: C) throws -> C.Reply {
        try Self.checked(try client().call(command))
    }

    /// Makes this agent pull from `source` once (`peer.add` with `direction` pull, `mode` once)
    /// and waits until `sync --wait` says it is caught up, on `client` (one of this agent's).
    func pullOnce(from source: BenchAgent, address: String, on client: AdminSocketClient) throws {
        try Self.checked(client.call(Admin.AddPeer(.init(nodeID: source.nodeID, address: address, direction: .pull, mode: .once))))
        try Self.checked(client.call(Admin.Sync(nodeID: source.nodeID, wait: true)))
    }

    /// The listen address the agent bound (`status.listen`).
    func listenAddress() throws -> String {
        try call(Admin.Status()).listen
    }

    /// `stats.doc_count`.
    func documentCount(_ client: AdminSocketClient) throws -> Int {
        Int(try Self.checked(client.call(Admin.Stats())).counts.docCount)
    }

    /// Peak resident set size so far (`VmHWM` from /proc/PID/status), in bytes.
    func peakResidentBytes() throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8)
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
            let kib = Int(line.split(separator: " ").dropFirst().first ?? "")
        else { throw ValidationError("no VmHWM for \(name)") }
        return kib * 1024
    }

    /// Peer traffic counters from `stats` (bytes on the TCP connections, both ways).
    func peerBytes() throws -> (sent: Int, received: Int) {
        let stats = try call(Admin.Stats())
        return (Int(stats.peerBytesSent), Int(stats.peerBytesReceived))
    }

    /// Kills the agent with SIGKILL (no clean shutdown) and waits for it to exit.
    func killHard() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// Starts the agent again on the same directory after its process has exited.
    func restart() throws {
        precondition(!process.isRunning, "restart after the agent exited")
        process = Process()
        try start()
    }

    /// Asks the agent to shut down and waits for it to exit (killing it if it does not).
    func stop() {
        guard process.isRunning else { return }
        _ = try? client().call(Admin.Shutdown())
        try? waitUntil("\(name) to exit") { !process.isRunning }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    deinit { stop() }

    /// The reply of `answer`; throws when it is the agent's error.
    @discardableResult
    static func checked<C: AdminCommand>(_ answer: Result<AdminAnswer<C>, AdminFailure>) throws -> C.Reply {
        switch answer {
        case .success(let answer): return answer.reply
        case .failure(let failure): throw ValidationError("\(C.name) failed: \(failure)")
        }
    }

    /// Polls `condition` every millisecond until it holds or `stopWaitSeconds` pass.
    private func waitUntil(_ what: String, _ condition: () throws -> Bool) throws {
        let deadline = Date().addingTimeInterval(Self.stopWaitSeconds)
        while Date() < deadline {
            if try condition() { return }
            usleep(1_000)
        }
        throw ValidationError("timed out waiting for \(what)")
    }

    /// Runs a short command to completion and returns its standard output.
    private static func runToEnd(_ path: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw ValidationError("\(path) \(arguments.joined(separator: " ")) failed") }
        return String(decoding: data, as: UTF8.self)
    }
}

/// Where the agents live and which `canopyd` runs them.
struct AgentBenchOptions: ParsableArguments {
    @Option(help: "The canopyd binary (default: the one next to canopy-bench).") var canopyd: String?
    @Flag(help: "Keep the temporary directory (databases and agent logs) for inspection.") var keep = false
    @Option(help: "The agents' [limits] batch-revisions (default: the agent's).") var batchRevisions: Int?
    @Option(help: "The agents' [limits] batches-in-flight (default: the agent's).") var batchesInFlight: Int?
    @Option(help: "The existing directory the agents' temporary directory is made in (default: /tmp; short, so admin socket paths fit).")
    var parent = "/tmp"

    /// The canopyd binary to run.
    func canopydPath() throws -> String {
        let path = canopyd ?? (URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
            .deletingLastPathComponent().appendingPathComponent("canopyd").path)
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw ValidationError("no canopyd at \(path): build it (swift build -c release --product canopyd) or pass --canopyd")
        }
        return path
    }

    /// A new directory under `--parent` (short, so admin socket paths fit in sun_path), removed
    /// by the returned closure unless `--keep`.
    func temporaryDirectory() -> (path: String, remove: () -> Void) {
        var template = Array((parent + "/canopy-bench-XXXXXX").utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            FileHandle.standardError.write(Data("canopy-bench: cannot make a directory in \(parent): \(String(cString: strerror(errno)))\n".utf8))
            Foundation.exit(1)
        }
        let path = String(cString: made)
        if keep { FileHandle.standardError.write(Data("keeping \(path)\n".utf8)) }
        return (path, { if !keep { try? FileManager.default.removeItem(atPath: path) } })
    }
}

/// Wall-clock and CPU timing for phases that run in other processes (the agents' CPU is read
/// from /proc, since the benchmark process itself mostly waits).
enum BenchClock {
    /// Monotonic seconds.
    static func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    /// User + system CPU seconds of process `pid` so far (/proc/PID/stat fields 14 and 15).
    static func cpuSeconds(pid: Int32) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command name: state is field 3, so utime (14) and stime (15) are at 11 and 12.
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// CPU seconds of this process (`CLOCK_PROCESS_CPUTIME_ID`) or of the calling thread
    /// (`CLOCK_THREAD_CPUTIME_ID`) so far.
    static func cpuSeconds(_ clock: clockid_t) -> Double {
        var time = timespec()
        clock_gettime(clock, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// The value at `fraction` (0…1) of sorted `samples` (nearest rank).
    static func percentile(_ sorted: [Double], _ fraction: Double) -> Double {
        precondition(!sorted.isEmpty, "no samples")
        let rank = Int((fraction * Double(sorted.count)).rounded(.up)) - 1
        return sorted[min(max(rank, 0), sorted.count - 1)]
    }
}

extension BenchAgent {
    /// The agent's process id (for CPU accounting).
    var pid: Int32 { process.processIdentifier }
}
