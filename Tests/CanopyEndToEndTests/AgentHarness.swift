import CanopyTestSupport
import CanopyAgent
import CanopyCore
import CanopyCrypto
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Runs the real `canopyd` and `canopyctl` binaries built next to this test bundle.
enum Binaries {
    /// The build products directory: the directory holding the running test executable.
    static let directory: String = {
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var url = URL(fileURLWithPath: executable)
        // On Linux the bundle is `…/debug/CanopyPackageTests.xctest` (a file); be robust to a
        // directory bundle too.
        while !FileManager.default.isExecutableFile(atPath: url.deletingLastPathComponent().appendingPathComponent("canopyd").path),
            url.pathComponents.count > 1
        {
            url.deleteLastPathComponent()
        }
        return url.deletingLastPathComponent().path
    }()

    static var canopyd: String { directory + "/canopyd" }
    static var canopyctl: String { directory + "/canopyctl" }

    /// Runs `canopyd` with `arguments` to completion.
    static func run(_ arguments: [String]) throws -> CommandResult { try CanopyEndToEndTests.run(canopyd, arguments) }
}

/// The outcome of a command run to completion.
struct CommandResult {
    var status: Int32
    var stdout: String
    var stderr: String
}

/// Seconds any single wait in these tests may take before the test fails (generous: the machine
/// may have two cores shared with other work).
let waitLimitSeconds = 30.0

/// Runs a binary to completion (bounded by `waitLimitSeconds`) and captures its output.
func run(_ path: String, _ arguments: [String], stdin: String? = nil, in directory: String? = nil) throws -> CommandResult {
    let process = ChildProcess()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    let input = Pipe()
    process.standardInput = input
    try process.run()
    if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
    try input.fileHandleForWriting.close()
    let outData = out.fileHandleForReading.readDataToEndOfFile()
    let errData = err.fileHandleForReading.readDataToEndOfFile()
    try waitForExit(process)
    return CommandResult(
        status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
        stderr: String(decoding: errData, as: UTF8.self))
}

/// Waits for a process to exit, failing after `waitLimitSeconds` (and killing it then).
func waitForExit(_ process: ChildProcess) throws {
    try poll("process \(process.processIdentifier) to exit") { !process.isRunning }
}

struct TimedOut: Error, CustomStringConvertible {
    var what: String
    var seconds = waitLimitSeconds
    var description: String { "timed out after \(seconds) s waiting for \(what)" }
}

/// Polls `condition` until it holds or `waitLimitSeconds` pass. The interval is how often to look,
/// never an assumption about how long anything takes.
func poll(_ what: String, limitSeconds: Double = waitLimitSeconds, _ condition: () throws -> Bool) throws {
    let deadline = Date().addingTimeInterval(limitSeconds)
    while Date() < deadline {
        if try condition() { return }
        usleep(20_000)
    }
    throw TimedOut(what: what, seconds: limitSeconds)
}

/// A temporary data directory under /tmp (short, so the socket path fits in sun_path).
final class TemporaryDirectory {
    let path: String

    init() {
        var template = Array("/tmp/canopy-e2e-XXXXXX".utf8CString)
        path = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// One `canopyd run` child process on a fresh, initialised data directory.
final class AgentProcess {
    let temporary = TemporaryDirectory()
    private(set) var process = ChildProcess()
    let nodeID: String
    var dataDir: String { temporary.path + "/data" }
    var socketPath: String { dataDir + "/admin.sock" }
    var logPath: String { temporary.path + "/canopyd.log" }

    /// `canopyd init` with the given extra arguments; does not start the agent.
    convenience init(initArguments: [String] = ["--listen", "127.0.0.1:0"]) throws {
        try self.init(preparing: { target in
            let result = try run(Binaries.canopyd, ["init", "--data-dir", target] + initArguments)
            guard result.status == 0 else { throw TimedOut(what: "canopyd init (status \(result.status): \(result.stderr))") }
        })
    }

    /// `prepare` makes the data directory at the path it is given; the node id is then read
    /// with `canopyd id`. Does not start the agent.
    init(preparing prepare: (String) throws -> Void) throws {
        try prepare(temporary.path + "/data")
        let result = try run(Binaries.canopyd, ["id", "--data-dir", temporary.path + "/data"])
        guard result.status == 0, let last = result.stdout.split(separator: "\n").last else {
            throw TimedOut(what: "canopyd id (status \(result.status): \(result.stderr))")
        }
        nodeID = String(last)
    }

    /// Kills the agent with SIGKILL (no clean shutdown) and starts it again on the same directory.
    func killAndRestart() throws {
        kill(process.processIdentifier, SIGKILL)
        try waitForExit(process)
        try restart()
    }

    /// Starts the agent again on the same directory after its process has exited.
    func restart(extraArguments: [String] = []) throws {
        let environment = process.environment
        process = ChildProcess()
        process.environment = environment
        try start(extraArguments: extraArguments)
    }

    /// Starts `canopyd run` and waits until its admin socket answers `status`.
    func start(extraArguments: [String] = []) throws {
        process.executableURL = URL(fileURLWithPath: Binaries.canopyd)
        process.arguments = ["run", "--data-dir", dataDir, "--log-level", "debug"] + extraArguments
        if !FileManager.default.fileExists(atPath: logPath) { _ = FileManager.default.createFile(atPath: logPath, contents: nil) }
        let log = FileHandle(forWritingAtPath: logPath)
        log?.seekToEndOfFile()
        process.standardOutput = log
        process.standardError = log
        try process.run()
        try poll("the admin socket of \(dataDir)") {
            guard process.isRunning else { throw TimedOut(what: "canopyd to start; it exited: \(self.log)") }
            return (try? AdminSocketClient(path: socketPath, receiveTimeoutSeconds: 10).request("status")["ok"]) == .bool(true)
        }
    }

    /// The agent's log so far (for failure messages).
    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// A connected admin client. Its reads time out (generously: a test's longest wait is well
    /// under it), so a hung agent fails the test instead of stalling the suite.
    func client() throws -> AdminSocketClient { try AdminSocketClient(path: socketPath, receiveTimeoutSeconds: 120) }

    /// Runs canopyctl against this agent.
    func ctl(_ arguments: [String], stdin: String? = nil) throws -> CommandResult {
        try run(Binaries.canopyctl, ["--data-dir", dataDir] + arguments, stdin: stdin)
    }

    /// Sends a signal to the agent.
    func signal(_ number: Int32) { kill(process.processIdentifier, number) }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}

/// A valid node id in its printed form, derived from a fixed seed byte.
func testNodeID(_ seed: UInt8) -> String {
    var entropy = DeterministicEntropy(seed: [UInt8](repeating: seed, count: DeterministicEntropy.seedBytes))
    return Identity.generate(random: &entropy).nodeID.description
}

extension AgentProcess {
    /// The `HOST:PORT` the agent actually listens on (`status.listen`).
    func listenAddress() throws -> String {
        guard case .string(let address)? = try client().request("status")["listen"] else {
            throw TimedOut(what: "a listen address in status")
        }
        return address
    }

    /// Two started agents that allow and dial each other.
    static func peeredPair() throws -> (AgentProcess, AgentProcess) {
        let a = try AgentProcess()
        let b = try AgentProcess()
        try a.start()
        try b.start()
        try a.allow(b)
        try b.allow(a)
        return (a, b)
    }

    /// Allows `other` and dials it at its listen address.
    func allow(_ other: AgentProcess) throws {
        let response = try client().request("peer.add", ["node_id": .string(other.nodeID), "address": .string(try other.listenAddress())])
        guard response["ok"] == .bool(true) else { throw TimedOut(what: "peer.add to succeed: \(response)") }
    }

    /// The document's body member `key` as this agent has it, or nil if it has no such document.
    func value(of id: String, _ key: String) throws -> JSONValue? {
        let response = try client().request("get", ["doc": .string(id)])
        return response["doc"]?.objectValue?[key]
    }

    /// Writes a document through the admin socket and returns its revision.
    @discardableResult
    func put(_ id: String, _ body: [String: JSONValue], replacing: String? = nil) throws -> String {
        var arguments: [String: JSONValue] = ["doc": .string(id), "body": .object(body)]
        if let replacing { arguments["rev"] = .string(replacing) }
        guard case .string(let rev)? = try client().request("put", arguments)["rev"] else {
            throw TimedOut(what: "put \(id) to succeed")
        }
        return rev
    }
}

extension AgentProcess {
    /// Appends config text (rule sections, limits) to the agent's canopy.conf: before it starts,
    /// or before a `reload`.
    func appendConfig(_ text: String) throws {
        let path = dataDir + "/canopy.conf"
        let original = try String(contentsOfFile: path, encoding: .utf8)
        try (original + "\n" + text).write(toFile: path, atomically: true, encoding: .utf8)
    }

    /// `doc_count` from `stats`.
    func documentCount() throws -> Int64 {
        guard case .int(let count)? = try client().request("stats")["doc_count"] else { return -1 }
        return count
    }
}

extension AgentProcess {
    /// A copy of the data directory `source` (left as it is), its node id read by `canopyd id`;
    /// does not start the agent.
    convenience init(copying source: String) throws {
        try self.init(preparing: { target in
            let copied = try run("/bin/cp", ["-a", source, target])
            guard copied.status == 0 else { throw TimedOut(what: "copying \(source): \(copied.stderr)") }
        })
    }
}
