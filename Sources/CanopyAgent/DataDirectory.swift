import CanopyCore
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The agent's data directory (`Protocol/design.md` §6.2) and the names inside it:
///
/// ```
/// DIR/              0700, owner only
///   canopy.conf     the config file (ConfigParser)
///   identity.key    the node's secret key, 0600
///   canopy.sqlite   the `default` database (+ -wal, -shm)
///   databases/      0700: every other database, NAME.sqlite (a '/' in NAME written as %2F)
///   admin.sock      the admin socket, 0600, while an agent runs
///   canopyd.lock    flock(LOCK_EX) held by the running agent for its whole life
///   pending-shares.json  databases peers offered that are not shared with them (db pending)
/// ```
public struct DataDirectory: Sendable {
    /// The directory path as given (not canonicalised, so messages show what the user typed).
    public let path: String

    /// Wraps a path. Nothing is touched on disk.
    public init(path: String) {
        self.path = path.count > 1 && path.hasSuffix("/") ? String(path.dropLast()) : path
    }

    public var configPath: String { path + "/canopy.conf" }
    public var identityPath: String { path + "/identity.key" }
    public var databasePath: String { path + "/canopy.sqlite" }
    public var adminSocketPath: String { path + "/admin.sock" }
    public var lockPath: String { path + "/canopyd.lock" }
    /// In a backup directory from the start of the backup until everything in it is written and
    /// synced; it says why the backup is not finished. `canopyd run` and `canopyd init` refuse a
    /// directory that holds it: restored, a backup cut short starts a node whose documents name
    /// attachment content it does not have, and that it never fetches again.
    public var unfinishedBackupPath: String { path + "/backup-unfinished" }
    /// Databases peers offered that are not shared with them (`db pending`), kept across restarts.
    public var pendingSharesPath: String { path + "/pending-shares.json" }

    /// Creates the directory with mode 0700 if it is missing, and its missing parents as `mkdir -p`
    /// would (mode 0755 less the umask); tightens an existing one to 0700 (it holds the secret
    /// key and the admin socket).
    /// The directory `path` is in, when the path names one (`a/b` → `a`, `/a` → `/`); nil for a
    /// single relative name, whose parent is the working directory.
    static func parent(of path: String) -> String? {
        var trimmed = Substring(path)
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return nil }
        let parent = trimmed[..<slash]
        return parent.isEmpty ? "/" : String(parent)
    }

    public func create() throws(AgentError) {
        if let parent = Self.parent(of: path), access(parent, F_OK) != 0 {
            do {
                try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
            } catch {
                throw .system(SystemError("create directory", parent))
            }
        }
        if mkdir(path, 0o700) != 0 {
            guard errno == EEXIST else { throw .system(SystemError("create directory", path)) }
            var info = stat()
            guard stat(path, &info) == 0 else { throw .system(SystemError("stat", path)) }
            guard info.st_mode & S_IFMT == S_IFDIR else { throw .system(SystemError("use directory", path, code: ENOTDIR)) }
        }
        guard chmod(path, 0o700) == 0 else { throw .system(SystemError("chmod 0700", path)) }
    }

    /// The database file and SQLite's two companions (write-ahead log, shared-memory index).
    public var databaseFilePaths: [String] { databaseFilePaths(.default) }

    /// The directory of the databases besides `default`.
    public var databasesPath: String { path + "/databases" }

    /// Attachment content of every database, one file per digest (`AttachmentStore`): content
    /// is stored once per node however many databases name it.
    public var attachmentsPath: String { path + "/attachments" }

    /// The SQLite file of the database `name`: `canopy.sqlite` for `default` (as a data directory
    /// made before there were several databases has it), `databases/NAME.sqlite` for the others.
    /// Names hold no '%', so writing '/' as %2F keeps one file per name and every name apart.
    public func databasePath(_ name: DatabaseName) -> String {
        if name == .default { return databasePath }
        return databasesPath + "/" + name.text.replacingOccurrences(of: "/", with: "%2F") + ".sqlite"
    }

    /// The database's file and SQLite's two companions (write-ahead log, shared-memory index).
    public func databaseFilePaths(_ name: DatabaseName) -> [String] {
        let file = databasePath(name)
        return [file, file + "-wal", file + "-shm"]
    }

    /// Makes the database files private before the store opens them: creates `canopy.sqlite`
    /// with mode 0600 when it is missing (SQLite gives its `-wal` and `-shm` the database file's
    /// mode), and narrows any of the three that exists to 0600 (a file copied or moved keeps its
    /// mode, whatever the directory's) where the file may be changed.
    public func restrictDatabaseFiles(_ name: DatabaseName = .default) throws(AgentError) {
        let databasePath = databasePath(name)
        let fd = open(databasePath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if fd >= 0 {
            close(fd)
        } else if errno != EEXIST {
            throw .system(SystemError("create", databasePath))
        }
        for path in databaseFilePaths(name) where access(path, F_OK) == 0 {
            // A file that may not be changed at all (immutable, or on a read-only file system) is
            // left as it is: opening it then reports that it is read-only, in words that say so.
            guard chmod(path, 0o600) == 0 || errno == EPERM || errno == EROFS else {
                throw .system(SystemError("chmod 0600", path))
            }
        }
    }

    /// Creates `databases/` (0700) if it is missing.
    public func createDatabasesDirectory() throws(AgentError) {
        guard mkdir(databasesPath, 0o700) == 0 || errno == EEXIST else {
            throw .system(SystemError("create directory", databasesPath))
        }
    }

    /// Throws `notInitialized` unless the identity and config exist.
    /// Throws `unfinishedBackup` when the directory is a backup that was not finished.
    public func requireNoUnfinishedBackup() throws(AgentError) {
        guard access(unfinishedBackupPath, F_OK) == 0 else { return }
        let reason = (try? Self.readFile(unfinishedBackupPath, limit: 4096)).map { String(decoding: $0, as: UTF8.self) }
        throw .unfinishedBackup(
            directory: path, reason: reason?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "its marker cannot be read")
    }

    /// Flushes a file or directory to disk (`fsync`).
    static func sync(_ path: String) throws(AgentError) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .system(SystemError("open", path)) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw .system(SystemError("fsync", path)) }
    }

    public func requireInitialized() throws(AgentError) {
        guard access(identityPath, F_OK) == 0, access(configPath, F_OK) == 0 else {
            throw .notInitialized(directory: path)
        }
    }

    /// Reads a whole small file; `limit` bounds the bytes accepted.
    static func readFile(_ path: String, limit: Int) throws(AgentError) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .system(SystemError("open", path)) }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw .system(SystemError("read", path))
            }
            if count == 0 { return bytes }
            guard bytes.count + count <= limit else {
                throw .system(SystemError("read (file larger than \(limit) bytes)", path, code: EFBIG))
            }
            bytes.append(contentsOf: chunk[0..<count])
        }
    }

    /// Writes a file atomically (temporary file, fsync, rename) with the given mode, so a crash
    /// leaves either the old or the new contents, never half of the new.
    static func writeFileAtomically(_ path: String, _ bytes: [UInt8], mode: mode_t) throws(AgentError) {
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard fd >= 0 else { throw .system(SystemError("create", temporary)) }
        var written = 0
        while written < bytes.count {
            let count = bytes[written...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                let error = SystemError("write", temporary)
                close(fd)
                unlink(temporary)
                throw .system(error)
            }
            written += count
        }
        let synced = fsync(fd) == 0
        let syncError = SystemError("fsync", temporary)
        close(fd)
        guard synced else { unlink(temporary); throw .system(syncError) }
        guard rename(temporary, path) == 0 else {
            let error = SystemError("rename into place", path)
            unlink(temporary)
            throw .system(error)
        }
    }
}

/// The data directory's exclusive lock: `flock(LOCK_EX | LOCK_NB)` on `canopyd.lock`, held until
/// the process exits (the kernel releases it even after kill -9, so a crashed agent never leaves
/// a stale lock). The file holds the owner's pid for people, not for the protocol.
package final class DirectoryLock: Sendable {
    private let fd: Int32
    /// The lock file path.
    public let path: String

    /// Takes the lock or throws `alreadyRunning` at once (never waits).
    public init(path: String) throws(AgentError) {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .system(SystemError("open lock file", path)) }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            close(fd)
            if code == EWOULDBLOCK { throw .alreadyRunning(lockPath: path) }
            throw .system(SystemError("lock", path, code: code))
        }
        let pid = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = pid.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        self.fd = fd
        self.path = path
    }

    deinit {
        close(fd)  // releases the flock
    }
}
