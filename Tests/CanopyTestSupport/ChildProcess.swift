import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A child process started with `posix_spawn`, for the tests that run `canopyd`, `canopyctl`
/// and other programs: the part of Foundation's `Process` they use, under the same names.
///
/// Foundation's `Process.run()` on Linux (swift-corelibs-foundation up to Swift 6.3.1) lists
/// `/proc/self/fd` to close the descriptors a child must not inherit, and copies each directory
/// entry's whole 256-byte name field: when an entry ends glibc's read buffer at the end of a
/// mapped page, the copy reads past it and the test process dies of SIGSEGV
/// (swiftlang/swift-corelibs-foundation#5472, fixed after 6.3.1). A suite that starts hundreds of
/// processes met it about once a run. Here the child closes every descriptor above 2 with
/// glibc's `posix_spawn_file_actions_addclosefrom_np`, and nothing lists the directory.
public final class ChildProcess: @unchecked Sendable {
    /// Why a process ended, as Foundation's `Process` says it.
    public typealias TerminationReason = Process.TerminationReason

    public var executableURL: URL?
    public var arguments: [String] = []
    public var currentDirectoryURL: URL?
    /// The child's whole environment; nil: this process's.
    public var environment: [String: String]?
    /// A `Pipe` (the child gets its reading end), a `FileHandle`, or nil (inherited).
    public var standardInput: Any?
    /// A `Pipe` (the child gets its writing end), a `FileHandle`, or nil (inherited).
    public var standardOutput: Any?
    public var standardError: Any?

    private let state = Mutex<State>(State())

    private struct State {
        var pid: pid_t = 0
        /// The status `waitpid` gave once the child ended.
        var status: Int32?
    }

    public init() {}

    /// The child's process id; 0 before `run`.
    public var processIdentifier: Int32 { state.withLock { $0.pid } }

    /// Starts the child. Throws when it cannot be started (no such file, not executable).
    public func run() throws {
        guard let path = executableURL?.path else { throw SpawnError(message: "no executable set") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (stream, target) in [(standardInput, Int32(0)), (standardOutput, 1), (standardError, 2)] {
            guard let fd = Self.descriptor(stream, forChildReading: target == 0) else { continue }
            // `FileHandle.nullDevice` has no descriptor (-1): the child opens /dev/null.
            let added = fd < 0
                ? posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0)
                : posix_spawn_file_actions_adddup2(&actions, fd, target)
            guard added == 0 else { throw SpawnError(message: "cannot give the child descriptor \(target): \(String(cString: strerror(added)))") }
        }
        guard Self.closeFrom(&actions, 3) == 0 else {
            throw SpawnError(message: "posix_spawn_file_actions_addclosefrom_np is missing: glibc 2.34 or later is needed")
        }
        if let directory = currentDirectoryURL?.path {
            guard Self.changeDirectory(&actions, directory) == 0 else { throw SpawnError(message: "cannot chdir to \(directory)") }
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // Its own process group, as Foundation's `Process` starts it: a terminal's Ctrl-C
        // reaches the test runner only.
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP))
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let environment = (environment ?? ProcessInfo.processInfo.environment).map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in environment { free(pointer) }
        }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, path, &actions, &attributes, argv, environment)
        guard result == 0 else { throw SpawnError(message: "cannot start \(path): \(String(cString: strerror(result)))") }
        state.withLock { $0.pid = pid }
        // The child holds its ends of the pipes now; the parent's copies of them go, so that a
        // read of the child's output ends when the child closes it.
        if let pipe = standardInput as? Pipe { try? pipe.fileHandleForReading.close() }
        if let pipe = standardOutput as? Pipe { try? pipe.fileHandleForWriting.close() }
        if let pipe = standardError as? Pipe { try? pipe.fileHandleForWriting.close() }
    }

    /// Whether the child has been started and has not ended (it is reaped when it has).
    public var isRunning: Bool {
        state.withLock { state in
            guard state.pid > 0, state.status == nil else { return false }
            var status: Int32 = 0
            let reaped = waitpid(state.pid, &status, WNOHANG)
            if reaped == state.pid {
                state.status = status
                return false
            }
            // ECHILD: reaped elsewhere; nothing to wait for.
            if reaped < 0 && errno == ECHILD {
                state.status = 0
                return false
            }
            return true
        }
    }

    /// Blocks until the child has ended.
    public func waitUntilExit() {
        while isRunning { usleep(5_000) }
    }

    /// Sends SIGTERM.
    public func terminate() {
        let pid = processIdentifier
        if pid > 0 { kill(pid, SIGTERM) }
    }

    /// The exit status, or the signal that ended the child (see `terminationReason`).
    public var terminationStatus: Int32 {
        guard let status = state.withLock({ $0.status }) else { return 0 }
        return Self.exited(status) ? (status >> 8) & 0xff : status & 0x7f
    }

    public var terminationReason: TerminationReason {
        guard let status = state.withLock({ $0.status }) else { return .exit }
        return Self.exited(status) ? .exit : .uncaughtSignal
    }

    private static func exited(_ status: Int32) -> Bool { status & 0x7f == 0 }

    /// The descriptor the child gets for a stream.
    private static func descriptor(_ stream: Any?, forChildReading reading: Bool) -> Int32? {
        switch stream {
        case let pipe as Pipe: return reading ? pipe.fileHandleForReading.fileDescriptor : pipe.fileHandleForWriting.fileDescriptor
        case let handle as FileHandle: return handle.fileDescriptor
        default: return nil
        }
    }

    private typealias FileActionsInt = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private typealias FileActionsPath = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32

    /// glibc's GNU extensions (2.34 and 2.29), which Swift's Glibc module does not declare.
    private static let closeFromFunction: FileActionsInt? = symbol("posix_spawn_file_actions_addclosefrom_np")
    private static let changeDirectoryFunction: FileActionsPath? = symbol("posix_spawn_file_actions_addchdir_np")

    private static func symbol<T>(_ name: String) -> T? {
        guard let handle = dlopen(nil, RTLD_NOW), let address = dlsym(handle, name) else { return nil }
        return unsafeBitCast(address, to: T.self)
    }

    private static func closeFrom(_ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ fd: Int32) -> Int32 {
        closeFromFunction?(actions, fd) ?? -1
    }

    private static func changeDirectory(_ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ path: String) -> Int32 {
        guard let function = changeDirectoryFunction else { return -1 }
        return path.withCString { function(actions, $0) }
    }
}

/// A child process that could not be started.
public struct SpawnError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}
