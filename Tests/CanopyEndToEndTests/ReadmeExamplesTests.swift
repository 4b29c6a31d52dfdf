import CanopyAgent
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The `canopyd` and `canopyctl` lines of README.md's ```sh blocks, run as a reader would type
/// them, in order, by `/bin/sh` with the built binaries first on `PATH` and `HOME` in a temporary
/// directory (so `~/.canopy` is a fresh data directory). The rules that make a line runnable here
/// are `substituted` and `skipReason`; a line's expected exit status is 0 unless its comment says
/// "exits N".
@Suite("README.md's shell examples run as written", .serialized)
struct ReadmeExamplesTests {
    struct Example {
        var line: Int
        var command: String
    }

    /// Every non-empty line of the ```sh blocks, with its line number (continuations joined).
    static func examples(_ text: String) -> [Example] {
        var examples: [Example] = []
        var inBlock = false
        var pending: Example?
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            if line.hasPrefix("```") {
                inBlock = line == "```sh"
                continue
            }
            guard inBlock, !line.trimmingCharacters(in: .whitespaces).isEmpty else { continue }
            var example = pending ?? Example(line: index + 1, command: "")
            example.command += line.hasSuffix("\\") ? String(line.dropLast()) : String(line)
            if line.hasSuffix("\\") { pending = example } else { pending = nil; examples.append(example) }
        }
        return examples
    }

    /// Why a line is not run here, or nil when it is.
    static func skipReason(_ command: String) -> String? {
        switch command.split(separator: " ").first {
        case "canopyd", "canopyctl": return nil
        case "sudo": return "needs root and a system user"
        case "systemctl": return "needs systemd"
        default: return "not a canopyd or canopyctl command (Tools/test would run this suite again; builds and canopy-sim are not the agent's examples)"
        }
    }

    /// The placeholders a reader replaces, replaced: a fixed listen port (which may be taken) by a
    /// free one, `DIR` by `~/.canopy`, and a peer's `NODEID`/`NODE-ID` and `HOST:PORT` by those of a running agent.
    static func substituted(_ command: String, peer: () throws -> AgentProcess) throws -> String {
        var words = command.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        for index in words.indices.dropFirst() where words[index - 1] == "--listen" { words[index] = "127.0.0.1:0" }
        // `DIR` stands for the data directory, which the README's first example makes `~/.canopy`.
        for index in words.indices where words[index] == "DIR" || words[index].hasPrefix("DIR/") {
            words[index] = "~/.canopy" + words[index].dropFirst(3)
        }
        var line = words.joined(separator: " ")
        if line.contains("NODEID") || line.contains("NODE-ID") || line.contains("HOST:PORT") {
            let agent = try peer()
            line = line.replacingOccurrences(of: "NODE-ID", with: agent.nodeID).replacingOccurrences(of: "NODEID", with: agent.nodeID)
                .replacingOccurrences(of: "HOST:PORT", with: try agent.listenAddress())
        }
        return line
    }

    /// The status a line's comment announces ("exits 3"), else 0.
    static func expectedStatus(_ command: String) -> Int32 {
        guard let comment = command.range(of: "#").map({ command[$0.upperBound...] }),
            let range = comment.range(of: #"exits? (status )?\d"#, options: .regularExpression)
        else { return 0 }
        return Int32(String(comment[range].last!))!
    }

    @Test("every canopyd and canopyctl line of the README's sh blocks exits as the README says")
    func examplesRun() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let home = TemporaryDirectory()
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = home.path
        environment["PATH"] = Binaries.directory + ":" + (environment["PATH"] ?? "/usr/bin:/bin")
        environment["CANOPY_DATA_DIR"] = nil
        var peerAgent: AgentProcess?
        let peer = { () throws -> AgentProcess in
            if let peerAgent { return peerAgent }
            let agent = try AgentProcess()
            try agent.start()
            peerAgent = agent
            return agent
        }
        var agents: [(example: Example, process: Process)] = []
        defer { for (_, process) in agents where process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        var ran = 0
        for example in Self.examples(readme) {
            if let reason = Self.skipReason(example.command) {
                print("README.md:\(example.line): not run (\(reason)): \(example.command)")
                continue
            }
            let line = try Self.substituted(example.command, peer: peer)
            ran += 1
            print("README.md:\(example.line): \(line)")
            if line.hasPrefix("canopyd run") {
                // In the foreground for ever: started in the background, it is ready when its admin
                // socket answers, and must exit 0 on SIGTERM once the other lines have run.
                let process = Process()
                process.executableURL = URL(fileURLWithPath: "/bin/sh")
                process.arguments = ["-c", "exec " + line]
                process.environment = environment
                process.standardError = FileHandle(forWritingAtPath: "/dev/null")
                try process.run()
                agents.append((example, process))
                let socket = Self.dataDirectory(line, home: home.path) + "/admin.sock"
                try poll("README.md:\(example.line) to answer on \(socket)") {
                    guard process.isRunning else { throw TimedOut(what: "README.md:\(example.line) exited with \(process.terminationStatus)") }
                    return (try? AdminSocketClient(path: socket, receiveTimeoutSeconds: 10).request("status")["ok"]) == .bool(true)
                }
                continue
            }
            let result = try Self.shell(line, environment: environment)
            #expect(result.status == Self.expectedStatus(example.command), "README.md:\(example.line): \(line)\n\(result.stdout)\(result.stderr)")
        }
        for (example, process) in agents {
            kill(process.processIdentifier, SIGTERM)
            try waitForExit(process)
            #expect(process.terminationStatus == 0, "README.md:\(example.line) exited \(process.terminationStatus) on SIGTERM")
        }
        #expect(ran > 0, "no canopyd or canopyctl line in README.md's sh blocks")
    }

    /// The `--data-dir` of a command line, `~` expanded.
    static func dataDirectory(_ line: String, home: String) -> String {
        let words = line.split(separator: " ").map(String.init)
        guard let index = words.firstIndex(of: "--data-dir"), index + 1 < words.count else { return home + "/.canopy" }
        return words[index + 1].replacingOccurrences(of: "~", with: home)
    }

    static func shell(_ line: String, environment: [String: String]) throws -> CommandResult {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", line]
        process.environment = environment
        // Files an example writes (`export > backup.json`) land in the reader's home, not here.
        if let home = environment["HOME"] { process.currentDirectoryURL = URL(fileURLWithPath: home) }
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle(forReadingAtPath: "/dev/null")
        try process.run()
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        try waitForExit(process)
        return CommandResult(status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
    }

    @Test("the example reader joins continuations, keeps comments, and finds announced exit statuses")
    func exampleReader() {
        let text = "```sh\ncanopyctl status   # from another terminal\ncanopyctl put a \\\n  --body '{}'\n```\n```\nnot sh\n```\n"
        #expect(Self.examples(text).map(\.command) == ["canopyctl status   # from another terminal", "canopyctl put a   --body '{}'"])
        #expect(Self.examples(text).map(\.line) == [2, 3])
        #expect(Self.expectedStatus("canopyctl get x   # exits 4: not found") == 4)
        #expect(Self.expectedStatus("canopyctl status   # from another terminal") == 0)
        #expect(Self.skipReason("systemctl reload canopyd") != nil && Self.skipReason("canopyd id --data-dir DIR") == nil)
    }
}
