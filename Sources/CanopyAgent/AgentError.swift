#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A failed system call, with the operation and the path or address it concerned (never data).
public struct SystemError: Error, Equatable, CustomStringConvertible {
    /// What was being done, e.g. "bind admin socket".
    public var operation: String
    /// The file path or address concerned, if any.
    public var subject: String?
    /// The errno value.
    public var code: Int32

    /// Captures the current `errno`.
    public init(_ operation: String, _ subject: String? = nil, code: Int32 = errno) {
        self.operation = operation
        self.subject = subject
        self.code = code
    }

    public var description: String {
        let reason = String(cString: strerror(code))
        if let subject { return "\(operation) \(subject): \(reason)" }
        return "\(operation): \(reason)"
    }
}

/// Errors that stop the agent from starting or a command from completing. Each carries what a
/// person needs to fix it.
public enum AgentError: Error, CustomStringConvertible {
    /// Another agent holds the data directory's lock.
    case alreadyRunning(lockPath: String)
    /// `init` found an identity already there.
    case identityExists(path: String)
    /// The data directory has not been initialised.
    case notInitialized(directory: String)
    /// The directory is a backup that was cut short or lacks content (`DataDirectory
    /// .unfinishedBackupPath`); `reason` is what its marker says.
    case unfinishedBackup(directory: String, reason: String)
    /// The identity file is unreadable or malformed.
    case badIdentity(path: String, detail: String)
    /// The config file is wrong.
    case config(ConfigError)
    /// A live agent already answers on the admin socket path.
    case adminSocketInUse(path: String)
    /// A path does not fit in `sun_path`.
    case socketPathTooLong(path: String)
    /// A listen address could not be resolved or used.
    case badAddress(String)
    /// A system call failed.
    case system(SystemError)
    /// The document store failed to open.
    case store(String)
    /// The database file is damaged (its start-up check found problems).
    case damagedDatabase(path: String, report: String)

    public var description: String {
        switch self {
        case .alreadyRunning(let lock):
            return "another canopyd is already running on this data directory (it holds \(lock))"
        case .identityExists(let path): return "an identity already exists at \(path); refusing to overwrite it"
        case .notInitialized(let dir): return "\(dir) is not a Canopy data directory; run `canopyd init --data-dir \(dir)` first"
        case .unfinishedBackup(let dir, let reason):
            return "\(dir) is a backup that was not finished (\(reason.prefix(600))); restored, it would start a node whose documents "
                + "name attachment content it does not hold, so it is neither run nor initialised. Make a new backup "
                + "(canopyctl backup NEW-PATH) or restore a finished one"
        case .badIdentity(let path, let detail): return "cannot use identity \(path): \(detail)"
        case .damagedDatabase(let path, let report):
            return "\(path) is damaged (SQLite's integrity_check: \(report.prefix(400))); the agent will not serve it. "
                + "Restore it from a backup (canopyctl backup), or move it aside and start from an empty database "
                + "(canopyd init --data-dir with a new directory), which gets the documents back from its peers"
        case .config(let error): return error.description
        case .adminSocketInUse(let path): return "an agent is already answering on \(path); not replacing it"
        case .socketPathTooLong(let path):
            return "socket path \(path) is longer than \(AgentLimits.unixPathBytesMax - 1) bytes"
        case .badAddress(let detail): return detail
        case .system(let error): return error.description
        case .store(let detail): return "cannot open the database: \(detail)"
        }
    }
}
