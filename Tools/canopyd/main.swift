// canopyd: the Canopy agent. `init` creates a data directory, `id` prints the node id, `run` runs
// the agent in the foreground until SIGTERM or SIGINT (see Tools/canopyd/README.md).
// It is a shell over the library's public API: a `Node` with the process's options and signals.
import ArgumentParser
import Canopy
import Dispatch
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The command line. Exit codes: 0 success, 1 error, 2 usage.
struct Canopyd: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "canopyd",
        abstract: "The Canopy peer-to-peer document replication agent.",
        subcommands: [Init.self, ID.self, Run.self])
}

/// `--data-dir`, shared by every subcommand.
struct DirectoryOption: ParsableArguments {
    @Option(name: .customLong("data-dir"), help: "The agent's data directory.")
    var dataDir: String
}

extension ResolutionStrategy: ExpressibleByArgument {
    public init?(argument: String) { self.init(parsing: argument) }
}

/// Prints `canopyd: error: …` and exits 1: every failure a user can fix ends here.
func fail(_ message: CustomStringConvertible) -> Never {
    FileHandleOutput.standardError("canopyd: error: \(message)\n")
    exit(1)
}

/// glibc's `mallopt(3)`: `<malloc.h>` is not part of Swift's Glibc module, so it is declared here
/// with its C signature (`int mallopt(int param, int value)`).
@_silgen_name("mallopt")
func glibcMallopt(_ parameter: Int32, _ value: Int32) -> Int32

/// `M_ARENA_MAX` from glibc's `<malloc.h>`.
let glibcMallocArenaMaxParameter: Int32 = -8
/// `M_MMAP_THRESHOLD` and `M_TRIM_THRESHOLD` from glibc's `<malloc.h>`.
let glibcMallocMmapThresholdParameter: Int32 = -3
let glibcMallocTrimThresholdParameter: Int32 = -1

/// Writes to stderr without Foundation.
enum FileHandleOutput {
    static func standardError(_ text: String) {
        var bytes = Array(text.utf8)
        _ = bytes.withUnsafeMutableBytes { write(2, $0.baseAddress, $0.count) }
    }
}

struct Init: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create a data directory: identity key, config file and database. Prints the node id last.")

    @OptionGroup var directory: DirectoryOption
    @Option(help: "How conflicts no rule covers are settled: automatic, local-wins, remote-wins, merge-json, manual or \"resolver NAME\".")
    var conflicts: ResolutionStrategy = .automatic
    @Option(help: "HOST:PORT to listen on for peers (port 0 picks a free port).")
    var listen = "127.0.0.1:4987"

    func run() throws {
        do throws(NodeError) {
            let nodeID = try Node.initialize(directory: directory.dataDir, listen: listen, conflicts: conflicts)
            print("initialised \(directory.dataDir)")
            print(nodeID)
        } catch {
            fail(error)
        }
    }
}

struct ID: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "id", abstract: "Print this node's id.")

    @OptionGroup var directory: DirectoryOption

    func run() throws {
        do throws(NodeError) {
            print(try Node.nodeID(directory: directory.dataDir))
        } catch {
            fail(error)
        }
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}

struct Run: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the agent in the foreground until SIGTERM or SIGINT; SIGHUP reloads the config.")

    @OptionGroup var directory: DirectoryOption
    @Option(help: "HOST:PORT to listen on, overriding the config file (port 0 picks a free port).")
    var listen: String?
    @Option(name: .customLong("admin-socket"), help: "Admin socket path (default DIR/admin.sock).")
    var adminSocket: String?
    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel: Logger.Level = .info

    /// glibc malloc arenas the agent may use (`M_ARENA_MAX`).
    static let mallocArenasMax: Int32 = 2
    /// Allocations below this come from the heap (glibc maps larger ones on their own).
    static let mallocMmapThreshold: Int32 = 4 << 20
    /// Free bytes the heap keeps at its top before it gives them back to the kernel.
    static let mallocTrimThreshold: Int32 = 8 << 20

    func run() throws {
        // Two malloc arenas instead of glibc's eight per core: Dispatch spreads the agent's work
        // over many worker threads, each of which would otherwise grow an arena of its own. Cuts
        // peak RSS during a large replication by about 4 MiB (`Protocol/design.md` §8: ≤ 64 MiB) at no
        // measurable cost in throughput.
        _ = glibcMallopt(glibcMallocArenaMaxParameter, Self.mallocArenasMax)
        // Buffers of a few hundred KiB (attachment parts, sealed frames) come from the heap and
        // go back to it, not to the kernel: with glibc's defaults each was mapped, faulted in
        // page by page, zeroed and unmapped, or trimmed off the heap's top and faulted in again,
        // which cost a 1 GiB attachment pull about a fifth of its rate. The heap keeps at most
        // `mallocTrimThreshold` free at its top.
        _ = glibcMallopt(glibcMallocMmapThresholdParameter, Self.mallocMmapThreshold)
        _ = glibcMallopt(glibcMallocTrimThresholdParameter, Self.mallocTrimThreshold)
        // Before the store opens its database: SQLite takes process settings only before its
        // first use. No global mutex per SQLite allocation (see the function's comment).
        Node.disableStoreMemoryStatistics()
        let level = logLevel
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        var options = Node.Options(
            listen: listen, adminSocket: adminSocket, createIfMissing: false, environment: Environment.variables(),
            logger: Logger(label: "canopyd"), onStopped: { Glibc.exit(0) })
        // `canopyctl shutdown` returns when the lock is free: free only once this process is gone.
        options.keepsLockUntilProcessExit = true
        // A damaged database is refused before it is served (Tools/canopyd/README.md, *Damage*).
        options.checksDatabasesOnOpen = true
        // Before the node starts: once its admin socket answers (or systemd hears READY=1), a
        // SIGTERM must stop it. One that arrives while the node is starting stops it once started.
        let signals = SignalHandlers()
        signals.install()
        let node: Node
        do throws(NodeError) {
            node = try Node(directory: directory.dataDir, options: options)
        } catch {
            fail(error)
        }
        signals.attach(node)
        withExtendedLifetime(signals) { dispatchMain() }
    }
}

/// Turns signals into Dispatch events on a queue of their own: TERM/INT shut down cleanly and exit 0;
/// HUP reloads the config. Installed before the node starts, and `install` returns only once every
/// source is registered: the default actions are ignored first, so a signal in the moment between
/// `signal(2)` and a source's registration would be lost. A TERM or INT that arrives before the
/// node exists is kept and acted on by `attach`; so is a HUP: the node tells systemd it is ready
/// as it finishes starting, just before `attach`, and a reload asked for in that moment must
/// happen (a reload of a config the node has just read changes nothing but is answered).
final class SignalHandlers: @unchecked Sendable {
    private let state = Mutex<(node: Node?, stopRequested: Bool, reloadRequested: Bool)>((nil, false, false))
    private var sources: [any DispatchSourceSignal] = []
    /// Not the main queue: `install` waits on the main thread for the registrations, which are
    /// reported on this queue.
    private let queue = DispatchQueue(label: "canopyd.signals")

    func install() {
        let registered = DispatchGroup()
        for number in [SIGTERM, SIGINT, SIGHUP] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { [self] in received(number) }
            registered.enter()
            source.setRegistrationHandler { registered.leave() }
            source.resume()
            sources.append(source)
        }
        registered.wait()
    }

    /// The node has started: from now on signals act on it, and a stop asked for meanwhile happens.
    func attach(_ node: Node) {
        let (stopNow, reloadNow) = state.withLock { state in
            state.node = node
            return (state.stopRequested, state.reloadRequested)
        }
        if stopNow {
            Task { await node.stop() }
        } else if reloadNow {
            Task { _ = try? await node.reload() }
        }
    }

    private func received(_ number: Int32) {
        let node: Node? = state.withLock { state in
            if state.node == nil {
                if number == SIGHUP { state.reloadRequested = true } else { state.stopRequested = true }
            }
            return state.node
        }
        guard let node else { return }
        // The node logs what a reload changed or why it failed; `onStopped` exits.
        Task {
            if number == SIGHUP { _ = try? await node.reload() } else { await node.stop() }
        }
    }
}

/// The process environment without Foundation.
enum Environment {
    static func variables() -> [String: String] {
        var result: [String: String] = [:]
        var cursor = environ
        while let entry = cursor.pointee {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "=") {
                result[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            cursor += 1
        }
        return result
    }
}

/// Parses, runs, and maps errors to exit codes (usage errors exit 2, as for canopyctl). No
/// arguments at all, or an unknown command, is a usage error too: the usage goes to stderr.
let commandNames = Canopyd.configuration.subcommands.map { $0._commandName }
let firstArgument = CommandLine.arguments.dropFirst().first
if firstArgument.map({ !$0.hasPrefix("-") && !commandNames.contains($0) && $0 != "help" }) ?? true {
    let problem = firstArgument.map { "unknown command '\($0.prefix(80))'" } ?? "no command given"
    FileHandleOutput.standardError("canopyd: error: \(problem); the commands are: \(commandNames.joined(separator: ", "))\n\n")
    FileHandleOutput.standardError(Canopyd.helpMessage() + "\n")
    exit(2)
}
do {
    var command = try Canopyd.parseAsRoot()
    try command.run()
} catch {
    let code = Canopyd.exitCode(for: error)
    if code == .success {
        Canopyd.exit(withError: error)
    }
    FileHandleOutput.standardError(Canopyd.fullMessage(for: error) + "\n")
    exit(2)  // run() reports its own failures with exit 1; what reaches here is a usage error
}
