import CanopyTestSupport
import CanopyAgent
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The shell lines of the user's documents' ```sh blocks — README.md (its five-minute tour
/// included), Tools/canopyd/README.md and Tools/canopyctl/README.md — run as a reader would type
/// them, in order, one document at a time, by `/bin/sh` with the built binaries first on `PATH`
/// and `HOME` in a temporary directory of the document's own (so `~/.canopy` is a fresh data
/// directory).
///
/// The rules, which a document's examples keep to:
///
/// - Which lines run (`skipReason`): `canopyd` and `canopyctl` lines, `python3 Tools/examples/…`
///   (the example resolver) and `printf` (appending to a config file). Others (`Tools/test`, which
///   would run this suite again, builds, `sudo`, `systemctl`) are printed as not run.
/// - A line's exit status must be 0, or N when its comment says "exits N".
/// - A `canopyd run` line, or any line ending in `&`, runs in the background (the `&` dropped) until
///   the document's lines are done. The next line runs once it is ready: `canopyd run` when its
///   admin socket answers; another when it has printed its first line, or, if its comment says
///   `prints: TEXT`, once it has printed TEXT (up to a `…`). At the end each still running gets
///   SIGTERM, and a `canopyd run` must then exit 0 (or have exited 0 already, after `shutdown`).
/// - Placeholders (`substituted`): `DIR` is `~/.canopy`; a peer's `NODEID`/`NODE-ID` and
///   `HOST:PORT` are those of an agent the test starts. A `--listen ADDRESS` becomes
///   `127.0.0.1:0` (the port may be taken); once the agent of that data directory is ready,
///   `ADDRESS` in later lines becomes the address it bound. A word starting `Tools/` is that path in
///   this repository.
@Suite("the documents' shell examples run as written", .serialized)
struct ReadmeExamplesTests {
    /// The documents whose ```sh blocks are run, relative to the repository.
    static let documents = ["README.md", "Tools/canopyd/README.md", "Tools/canopyctl/README.md"]

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

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
        let words = command.split(separator: " ")
        switch words.first {
        case "canopyd", "canopyctl", "printf": return nil
        case "python3" where words.count > 1 && words[1].hasPrefix("Tools/examples/"): return nil
        case "sudo": return "needs root and a system user"
        case "systemctl": return "needs systemd"
        default: return "not an agent example (Tools/test would run this suite again; builds, benchmarks and the simulator are not)"
        }
    }

    /// The line without its comment (a `#` after a space, outside quotes), trailing spaces trimmed.
    static func withoutComment(_ command: String) -> String {
        var quote: Character?
        var previous: Character = " "
        for (offset, character) in command.enumerated() {
            if let open = quote {
                if character == open { quote = nil }
            } else if character == "'" || character == "\"" {
                quote = character
            } else if character == "#", previous == " " {
                return String(command.prefix(offset)).trimmingCharacters(in: .whitespaces)
            }
            previous = character
        }
        return command.trimmingCharacters(in: .whitespaces)
    }

    /// The line to start in the background (its `&` dropped), or nil for a line run to completion.
    static func background(_ command: String) -> String? {
        let line = withoutComment(command)
        if line.hasSuffix("&") { return String(line.dropLast()).trimmingCharacters(in: .whitespaces) }
        return line.hasPrefix("canopyd run") ? line : nil
    }

    /// What a background line's comment says it prints (`prints: TEXT`, up to a `…`), if anything.
    static func announcedOutput(_ command: String) -> String? {
        guard let comment = command.range(of: "# ").map({ command[$0.upperBound...] }),
            let said = comment.range(of: "prints: ")
        else { return nil }
        let text = comment[said.upperBound...].prefix { $0 != "…" }
        return text.isEmpty ? nil : String(text)
    }

    /// The places a reader fills in, filled in: `--listen` addresses by `127.0.0.1:0` (recorded in
    /// `listens` by data directory), `DIR` by `~/.canopy`, a peer's `NODEID`/`NODE-ID` and
    /// `HOST:PORT` by those of a running agent, an address an agent was told to listen on by the one
    /// it bound (`bound`), and `Tools/…` by the path in this repository.
    static func substituted(
        _ command: String, peer: () throws -> AgentProcess, listens: inout [String: String], bound: [String: String]
    ) throws -> String {
        var words = command.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        // `DIR` stands for the data directory, which the documents' first examples make `~/.canopy`.
        for index in words.indices where words[index] == "DIR" || words[index].hasPrefix("DIR/") {
            words[index] = "~/.canopy" + words[index].dropFirst(3)
        }
        for index in words.indices.dropFirst() where words[index - 1] == "--listen" {
            listens[dataDirectory(words.joined(separator: " "), home: "~")] = words[index]
            words[index] = "127.0.0.1:0"
        }
        for index in words.indices where words[index].hasPrefix("Tools/") {
            words[index] = root.appendingPathComponent(words[index]).path
        }
        var line = words.joined(separator: " ")
        for (address, actual) in bound.sorted(by: { $0.key > $1.key }) {
            line = line.replacingOccurrences(of: address, with: actual)
        }
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

    /// A process started by a background line, with what it has printed so far.
    final class Background: @unchecked Sendable {
        let place: String
        let process = ChildProcess()
        let isAgent: Bool
        private let lock = NSLock()
        private var output = Data()
        private let reading = DispatchGroup()

        init(place: String, line: String, environment: [String: String], directory: String) throws {
            self.place = place
            isAgent = line.hasPrefix("canopyd run")
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", "exec " + line]
            process.environment = environment
            process.currentDirectoryURL = URL(fileURLWithPath: directory)
            process.standardInput = FileHandle(forReadingAtPath: "/dev/null")
            process.standardError = FileHandle(forWritingAtPath: "/dev/null")
            let pipe = Pipe()
            process.standardOutput = pipe
            try process.run()
            DispatchQueue.global().async(group: reading) { [self] in
                while case let data = pipe.fileHandleForReading.availableData, !data.isEmpty {
                    lock.withLock { output.append(data) }
                }
            }
        }

        var printed: String { lock.withLock { String(decoding: output, as: UTF8.self) } }
    }

    @Test("every example line of each document's sh blocks runs and exits as the document says", arguments: documents)
    func examplesRun(document: String) throws {
        let text = try String(contentsOf: Self.root.appendingPathComponent(document), encoding: .utf8)
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
        var listens: [String: String] = [:]
        var bound: [String: String] = [:]
        var started: [Background] = []
        defer { for job in started where job.process.isRunning { kill(job.process.processIdentifier, SIGKILL) } }
        var ran = 0
        for example in Self.examples(text) {
            let place = "\(document):\(example.line)"
            if let reason = Self.skipReason(example.command) {
                print("\(place): not run (\(reason)): \(example.command)")
                continue
            }
            let line = try Self.substituted(example.command, peer: peer, listens: &listens, bound: bound)
            ran += 1
            print("\(place): \(line)")
            guard let command = Self.background(line) else {
                let result = try Self.shell(line, environment: environment)
                #expect(result.status == Self.expectedStatus(example.command), "\(place): \(line)\n\(result.stdout)\(result.stderr)")
                continue
            }
            let job = try Background(place: place, line: command, environment: environment, directory: home.path)
            started.append(job)
            if job.isAgent {
                // Ready when its admin socket answers; the address it was told to listen on then
                // stands for the one it bound.
                let directory = Self.dataDirectory(command, home: home.path)
                let socket = directory + "/admin.sock"
                var listen: String?
                try poll("\(place) to answer on \(socket)") {
                    guard job.process.isRunning else { throw TimedOut(what: "\(place) exited with \(job.process.terminationStatus)") }
                    guard case .string(let address)? = try? AdminSocketClient(path: socket, receiveTimeoutSeconds: 10).request("status")["listen"] else { return false }
                    listen = address
                    return true
                }
                if let told = listens[Self.dataDirectory(command, home: "~")], let listen { bound[told] = listen }
            } else {
                let awaited = Self.announcedOutput(example.command)
                try poll("\(place) to print \(awaited.map { "\"\($0)\"" } ?? "its first line")") {
                    let printed = job.printed
                    if let awaited { if printed.contains(awaited) { return true } } else if printed.contains("\n") { return true }
                    guard job.process.isRunning else { throw TimedOut(what: "\(place) exited with \(job.process.terminationStatus), having printed: \(printed)") }
                    return false
                }
            }
        }
        for job in started {
            if job.process.isRunning { kill(job.process.processIdentifier, SIGTERM) }
            try waitForExit(job.process)
            if job.isAgent {
                #expect(job.process.terminationStatus == 0, "\(job.place) exited \(job.process.terminationStatus) on SIGTERM")
            }
        }
        #expect(ran > 0, "no example line in \(document)'s sh blocks")
    }

    /// The `--data-dir` of a command line, `~` expanded.
    static func dataDirectory(_ line: String, home: String) -> String {
        let words = line.split(separator: " ").map(String.init)
        guard let index = words.firstIndex(of: "--data-dir"), index + 1 < words.count else { return home + "/.canopy" }
        return words[index + 1].replacingOccurrences(of: "~", with: home)
    }

    static func shell(_ line: String, environment: [String: String]) throws -> CommandResult {
        let process = ChildProcess()
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
        #expect(Self.skipReason("python3 Tools/examples/resolver.py --socket ~/b/admin.sock") == nil && Self.skipReason("Tools/test") != nil)
        #expect(Self.withoutComment(##"canopyctl put a --body '{"n":"#1"}'   # a comment"##) == ##"canopyctl put a --body '{"n":"#1"}'"##)
        #expect(Self.background("canopyd run --data-dir ~/a 2> ~/a.log &   # in the background") == "canopyd run --data-dir ~/a 2> ~/a.log")
        #expect(Self.background("canopyd run --data-dir ~/a") == "canopyd run --data-dir ~/a")
        #expect(Self.background("canopyctl --data-dir ~/a status   # not & here") == nil)
        #expect(Self.announcedOutput("python3 r.py &   # prints: answered list 5-…") == "answered list 5-")
        #expect(Self.announcedOutput("python3 r.py &   # merges") == nil)
    }

    @Test("a --listen address becomes port 0, and later lines get the address the agent bound; Tools/ paths are the repository's")
    func placeholders() throws {
        var listens: [String: String] = [:]
        let peer = { () throws -> AgentProcess in throw TimedOut(what: "no peer in this test") }
        let initialise = try Self.substituted("canopyd init --data-dir ~/b --listen 127.0.0.1:4988", peer: peer, listens: &listens, bound: [:])
        #expect(initialise == "canopyd init --data-dir ~/b --listen 127.0.0.1:0")
        #expect(listens == ["~/b": "127.0.0.1:4988"])
        let add = try Self.substituted("canopyctl --data-dir ~/a peer add X 127.0.0.1:4988", peer: peer, listens: &listens, bound: ["127.0.0.1:4988": "127.0.0.1:40001"])
        #expect(add == "canopyctl --data-dir ~/a peer add X 127.0.0.1:40001")
        let resolver = try Self.substituted("python3 Tools/examples/resolver.py", peer: peer, listens: &listens, bound: [:])
        #expect(resolver == "python3 " + Self.root.appendingPathComponent("Tools/examples/resolver.py").path)
        #expect(try Self.substituted("canopyctl --data-dir DIR status", peer: peer, listens: &listens, bound: [:]) == "canopyctl --data-dir ~/.canopy status")
    }
}
