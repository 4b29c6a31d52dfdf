import ArgumentParser
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Everything an experiment leaves behind that must go when the tool ends, however it ends:
/// child processes (SIGKILL), tmpfs mounts (lazy unmount) and temporary directories. `runAll` runs
/// at exit (`atexit`) and on SIGINT, SIGTERM and SIGHUP; experiments also clean up after
/// themselves as they go, so this is the last line, not the usual path.
///
/// Invariants: `runAll` runs once at a time (a signal may arrive while the tool exits); once a
/// signal has arrived, a child registered later (the experiment's thread goes on until the process
/// ends) is killed at once.
final class Cleanup: @unchecked Sendable {
    static let shared = Cleanup()

    private let lock = NSLock()
    private let running = NSLock()
    private var pids: Set<Int32> = []
    private var mounts: [String] = []
    private var directories: [String] = []
    private var terminating = false
    /// `--keep`: temporary directories stay for inspection (processes and mounts still go).
    var keepDirectories = false

    func add(pid: Int32) {
        let late = lock.withLock { () -> Bool in
            pids.insert(pid)
            return terminating
        }
        if late { kill(pid, SIGKILL) }
    }

    func remove(pid: Int32) { lock.withLock { _ = pids.remove(pid) } }
    /// A signal arrived: the tool is ending, whatever the experiment's thread does meanwhile.
    var isTerminating: Bool { lock.withLock { terminating } }
    func add(mount: String) { lock.withLock { mounts.append(mount) } }
    func remove(mount: String) { lock.withLock { mounts.removeAll { $0 == mount } } }
    func add(directory: String) { lock.withLock { directories.append(directory) } }

    /// Kills every registered child, unmounts every registered mount and removes the directories.
    func runAll() {
        running.withLock {
            let (children, points, paths) = lock.withLock { () -> (Set<Int32>, [String], [String]) in
                defer { pids = [] }
                return (pids, mounts, keepDirectories ? [] : directories)
            }
            for pid in children {
                kill(pid, SIGKILL)
                var status: Int32 = 0
                waitpid(pid, &status, 0)
            }
            for point in points.reversed() { _ = umount2(point, Int32(MNT_DETACH)) }
            for path in paths.reversed() { try? FileManager.default.removeItem(atPath: path) }
        }
    }

    /// On a signal: no new child survives, then everything goes.
    private func terminate(_ number: Int32) -> Never {
        lock.withLock { terminating = true }
        FileHandle.standardError.write(Data("canopy-torture: signal \(number), stopping every agent\n".utf8))
        runAll()
        _exit(128 + number)
    }

    /// Installs the exit and signal hooks (once, before any experiment starts). The signal handler
    /// only writes the signal's number to a pipe (async-signal-safe); a thread of its own reads it
    /// and cleans up.
    func install() {
        atexit { Cleanup.shared.runAll() }
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { return }
        signalPipeWriter = fds[1]
        let reader = fds[0]
        Thread {
            var byte: UInt8 = 0
            while read(reader, &byte, 1) != 1 {}
            Cleanup.shared.terminate(Int32(byte))
        }.start()
        for number in [SIGINT, SIGTERM, SIGHUP] {
            signal(number) { number in
                var byte = UInt8(truncatingIfNeeded: number)
                _ = write(signalPipeWriter, &byte, 1)
            }
        }
        // A write to an agent that has just been killed must be an error, not the end of the tool.
        signal(SIGPIPE, SIG_IGN)
    }
}

/// Where the signal handler writes (set once by `Cleanup.install`, before any signal is handled).
nonisolated(unsafe) private var signalPipeWriter: Int32 = -1

/// A new directory under /tmp (short, so admin socket paths fit in sun_path), registered for
/// removal.
func makeTemporaryDirectory(_ prefix: String) throws -> String {
    var template = Array("/tmp/\(prefix)-XXXXXX".utf8CString)
    guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
        throw ValidationError("cannot create a temporary directory under /tmp: \(String(cString: strerror(errno)))")
    }
    let path = String(cString: made)
    Cleanup.shared.add(directory: path)
    return path
}

/// Monotonic seconds.
func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

/// Sleeps for `seconds` (fractions allowed).
func pause(_ seconds: Double) {
    guard seconds > 0 else { return }
    usleep(useconds_t(min(seconds, 1000) * 1_000_000))
}

/// Polls `condition` every `interval` seconds until it holds (true) or `limit` seconds pass (false).
func waitUntil(limit: Double, interval: Double = 0.01, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = now() + limit
    while true {
        if try condition() { return true }
        if now() >= deadline { return false }
        pause(interval)
    }
}

/// A failure of the experiment itself (not a missed target): an agent that would not start, a
/// command that did not answer. Ends the tool with a message and status 1.
struct ExperimentFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Free TCP ports on 127.0.0.1 for agents that must come back on the same address after a restart.
///
/// The harness in the tests lets each agent bind port 0; an agent restarted here must keep its
/// address (its peer redials it there), so ports are picked below the kernel's ephemeral range
/// (`ip_local_port_range`), where no outgoing connection is given one while the agent is down, and
/// each is tested by binding it. A port is never handed out twice in one run.
enum Ports {
    private static let lock = NSLock()
    nonisolated(unsafe) private static var handedOut: Set<UInt16> = []
    nonisolated(unsafe) private static var generator = SystemRandomNumberGenerator()

    static func free() throws -> UInt16 {
        let ephemeralLow =
            (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8))
            .flatMap { $0.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).first }
            .flatMap { UInt16($0) } ?? 32768
        let low: UInt16 = 10_000
        let high = max(ephemeralLow, low + 1000)
        return try lock.withLock {
            for _ in 0..<1000 {
                let port = UInt16.random(in: low..<high, using: &generator)
                if !handedOut.contains(port), bindable(port) {
                    handedOut.insert(port)
                    return port
                }
            }
            throw ExperimentFailure("no free TCP port on 127.0.0.1 between \(low) and \(high)")
        }
    }

    /// True when a listening socket can take `port` on 127.0.0.1 now.
    private static func bindable(_ port: UInt16) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        inet_pton(AF_INET, "127.0.0.1", &address.sin_addr)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }
}

/// The outcome of a command run to completion.
struct CommandResult {
    var status: Int32
    var stdout: String
    var stderr: String
    /// The command was killed because it ran past its time limit.
    var timedOut = false
}

/// Runs `path` with `arguments` to completion, killing it after `limit` seconds.
func runCommand(_ path: String, _ arguments: [String], limit: Double = 60) throws -> CommandResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle(forReadingAtPath: "/dev/null")
    try process.run()
    let pid = process.processIdentifier
    Cleanup.shared.add(pid: pid)
    defer { Cleanup.shared.remove(pid: pid) }
    let killed = LockedFlag()
    DispatchQueue.global().asyncAfter(deadline: .now() + limit) {
        if process.isRunning {
            killed.set()
            kill(pid, SIGKILL)
        }
    }
    // stdout on another thread so that neither pipe can fill while the other is read.
    let stdoutData = LockedData()
    let readerDone = DispatchSemaphore(value: 0)
    Thread {
        stdoutData.set(out.fileHandleForReading.readDataToEndOfFile())
        readerDone.signal()
    }.start()
    let errData = err.fileHandleForReading.readDataToEndOfFile()
    readerDone.wait()
    process.waitUntilExit()
    return CommandResult(
        status: process.terminationStatus, stdout: String(decoding: stdoutData.get(), as: UTF8.self),
        stderr: String(decoding: errData, as: UTF8.self), timedOut: killed.isSet)
}

/// Work that loops on a thread of its own until `stop`: subclasses override `run` and check
/// `stopping` between steps.
class BackgroundLoop: @unchecked Sendable {
    private let stopFlag = LockedFlag()
    private let done = DispatchSemaphore(value: 0)

    var stopping: Bool { stopFlag.isSet }

    func start() {
        Thread { [self] in
            run()
            done.signal()
        }.start()
    }

    /// Asks the loop to end after its current step and waits until it has.
    func stop() {
        stopFlag.set()
        done.wait()
    }

    func run() { preconditionFailure("a BackgroundLoop subclass overrides run()") }
}

/// A flag set from another thread.
final class LockedFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    func set() { lock.withLock { value = true } }
    var isSet: Bool { lock.withLock { value } }
}

/// Bytes handed over from another thread.
final class LockedData: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()
    func set(_ value: Data) { lock.withLock { data = value } }
    func get() -> Data { lock.withLock { data } }
}

/// A counter shared between threads.
final class LockedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func add(_ amount: Int = 1) { lock.withLock { count += amount } }
    var value: Int { lock.withLock { count } }
}
