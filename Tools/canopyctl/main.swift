// canopyctl: drives a running canopyd through its admin socket (Protocol/admin-v1.md).
// Human-readable tables by default, exact JSON with --json. Exit codes: 0 ok, 1 error, 2 usage,
// 3 conflict, 4 not found, 5 agent not reachable, 6 agent busy.
import CanopyAdmin
import ArgumentParser
import CanopyAgent
import CanopyCore
import CanopyStore
import Foundation

/// The documented exit codes.
enum ExitStatus: Int32 {
    case ok = 0, error = 1, usage = 2, conflict = 3, notFound = 4, unreachable = 5
    /// The agent serves as many admin clients as it allows (`busy`); trying again later works.
    case busy = 6
}

/// A failure that ends the command with a given exit status and a message on stderr.
struct CtlFailure: Error {
    var status: ExitStatus
    var message: String
    /// The agent's error object, printed on stdout with --json.
    var errorObject: JSONValue? = nil
    /// The agent did not answer within the connection's receive timeout.
    var timedOut = false
}

extension AdminSocketClient.ClientError {
    /// True for `timedOut`.
    var isTimeout: Bool {
        if case .timedOut = self { return true }
        return false
    }
}

struct Canopyctl: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "canopyctl",
        abstract: "Inspect and drive a running canopyd through its admin socket.",
        discussion: "Exit codes: 0 ok, 1 error, 2 usage, 3 conflict, 4 not found, 5 agent not reachable, 6 agent busy.",
        subcommands: [
            Status.self, Peers.self, PeerCommand.self, Put.self, Get.self, Delete.self, Conflicts.self, Resolve.self,
            Why.self, Compare.self, Changes.self, Import.self, Export.self, Sync.self, Events.self, Stats.self, Reload.self, Shutdown.self,
            Backup.self, Check.self, DatabaseCommand.self, Share.self, Unshare.self, Attach.self, AttachmentCommand.self, Detach.self, Compact.self,
        ])
}

/// Options every command takes: where the agent is and how to print.
struct ConnectionOptions: ParsableArguments {
    @Option(name: .customLong("data-dir"), help: "The agent's data directory (its socket is DIR/admin.sock).")
    var dataDir: String?
    @Option(help: "The admin socket path (overrides --data-dir).")
    var socket: String?
    @Flag(help: "Print exact JSON instead of tables.")
    var json = false

    /// The socket path to use, or a usage failure when neither option nor $CANOPY_DATA_DIR says.
    func socketPath() throws -> String {
        if let socket { return socket }
        if let dataDir { return DataDirectory(path: dataDir).adminSocketPath }
        if let dir = ProcessInfo.processInfo.environment["CANOPY_DATA_DIR"], !dir.isEmpty {
            return DataDirectory(path: dir).adminSocketPath
        }
        throw CtlFailure(status: .usage, message: "say where the agent is: --data-dir DIR or --socket PATH (or set CANOPY_DATA_DIR)")
    }

    func connect() throws -> AdminSocketClient {
        let path = try socketPath()
        do {
            return try AdminSocketClient(path: path)
        } catch {
            throw CtlFailure(status: .unreachable, message: "agent not reachable: \(error) (is canopyd running?)")
        }
    }

    /// Connects, sends `command` and returns the agent's answer; an error becomes a `CtlFailure`
    /// with the matching exit status.
    func call<C: AdminCommand>(_ command: C) throws -> AdminAnswer<C> {
        try call(connect(), command)
    }

    func call<C: AdminCommand>(_ client: AdminSocketClient, _ command: C) throws -> AdminAnswer<C> {
        let answer: Result<AdminAnswer<C>, AdminFailure>
        do {
            answer = try client.call(command)
        } catch {
            throw CtlFailure(status: .error, message: "\(error)", timedOut: error.isTimeout)
        }
        switch answer {
        case .success(let answer): return answer
        case .failure(let failure): throw Self.failure(failure)
        }
    }

    /// The answer of a command whose line was sent another way (an upload or a download); the
    /// agent's error becomes the failure that ends the command.
    func answer<C: AdminCommand>(_ answer: Result<AdminAnswer<C>, AdminFailure>) throws -> AdminAnswer<C> {
        switch answer {
        case .success(let answer): return answer
        case .failure(let failure): throw Self.failure(failure)
        }
    }

    /// The agent's error as the failure that ends the command, with its exit status.
    static func failure(_ failure: AdminFailure) -> CtlFailure {
        let status: ExitStatus = switch failure.code {
        case .conflict: .conflict
        case .notFound: .notFound
        case .busy: .busy
        default: .error
        }
        let message = failure.code == .busy ? "agent busy, try again: \(failure.message)" : failure.message
        return CtlFailure(status: status, message: message, errorObject: try? JSONValueEncoder().encode(failure))
    }
}

/// `--db NAME`: the database a document command works on.
struct DatabaseOption: ParsableArguments {
    @Option(name: .customLong("db"), help: "The database (see `canopyctl db list`).")
    var db = "default"

    /// `arguments` with the database named (`db`), as the document commands take it.
    func adding(to arguments: [String: JSONValue]) -> [String: JSONValue] {
        arguments.merging(["db": .string(db)]) { _, new in new }
    }
}

/// Parses a JSON object given on the command line, in a file, or on stdin.
func readBody(inline: String?, file: String?) throws -> JSONValue {
    let data: Data
    if let inline {
        data = Data(inline.utf8)
    } else if let file, file != "-" {
        guard let contents = FileManager.default.contents(atPath: file) else {
            throw CtlFailure(status: .error, message: "cannot read \(file)")
        }
        data = contents
    } else {
        data = FileHandle.standardInput.readDataToEndOfFile()
    }
    do {
        let value = try JSONValue.parseInput(data)
        guard case .object = value else { throw CtlFailure(status: .usage, message: "the body must be a JSON object") }
        // The agent would refuse it too; said here before megabytes travel to it.
        let size = CanonicalJSON.encode(value).count
        guard size <= StoreLimits.bodyBytesMax else {
            throw CtlFailure(status: .error, message: StoreInputError.bodyTooLarge(documentID: nil, bytes: size, limit: StoreLimits.bodyBytesMax).description)
        }
        return value
    } catch let error as JSONError {
        throw CtlFailure(status: .usage, message: "the body is not usable: \(error)")
    }
}

/// Prints `value` as one line of canonical JSON.
func printJSON(_ value: JSONValue) {
    FileHandle.standardOutput.write(Data(CanonicalJSON.encode(value) + [UInt8(ascii: "\n")]))
}

func printError(_ message: String) {
    FileHandle.standardError.write(Data("canopyctl: \(message)\n".utf8))
}

let arguments = reorderedArguments(Array(CommandLine.arguments.dropFirst()))
if let problem = commandProblem(arguments) {
    printError(problem.message + "\n")
    let help = problem.group.map { Canopyctl.helpMessage(for: $0) } ?? Canopyctl.helpMessage()
    FileHandle.standardError.write(Data((help + "\n").utf8))
    exit(ExitStatus.usage.rawValue)
}

do {
    var command = try Canopyctl.parseAsRoot(arguments)
    try command.run()
} catch let failure as CtlFailure {
    if let object = failure.errorObject, CommandLine.arguments.contains("--json") {
        printJSON(.object(["ok": .bool(false), "error": object]))
    }
    printError(failure.message)
    exit(failure.status.rawValue)
} catch {
    let code = Canopyctl.exitCode(for: error)
    if code == .success {
        Canopyctl.exit(withError: error)  // --help, --version
    }
    FileHandle.standardError.write(Data((Canopyctl.fullMessage(for: error) + "\n").utf8))
    exit(ExitStatus.usage.rawValue)  // every other error is ArgumentParser's: a usage error
}
