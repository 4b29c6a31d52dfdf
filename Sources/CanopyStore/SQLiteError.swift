import CSQLite

/// An error reported by SQLite. It carries the primary and extended result codes, SQLite's
/// message, and the SQL text of the statement — never the values bound to it, which may hold
/// user data (GRDB's rule).
public struct SQLiteError: Error, Equatable, CustomStringConvertible, Sendable {
    /// The primary result code (`SQLITE_BUSY`, `SQLITE_CONSTRAINT`, …).
    public let code: Int32
    /// The extended result code (`SQLITE_CONSTRAINT_UNIQUE`, …).
    public let extendedCode: Int32
    /// SQLite's message for the error.
    public let message: String
    /// The SQL being prepared or run, or nil when the error is not tied to a statement.
    public let sql: String?
    /// The database file, when the connection knows it (named in the description).
    public let databasePath: String?

    /// Creates an error from its parts.
    public init(code: Int32, extendedCode: Int32, message: String, sql: String?, databasePath: String? = nil) {
        self.code = code
        self.extendedCode = extendedCode
        self.message = message
        self.sql = sql
        self.databasePath = databasePath
    }

    /// Reads the error state of `connection` after a call returned `result`.
    init(result: Int32, connection: OpaquePointer?, sql: String?) {
        let extended = connection.map { sqlite3_extended_errcode($0) } ?? result
        let message = connection.flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) }
            ?? String(cString: sqlite3_errstr(result))
        let path = connection.flatMap { sqlite3_db_filename($0, "main") }.map { String(cString: $0) }
        self.init(code: result & 0xff, extendedCode: extended, message: message, sql: sql, databasePath: path?.isEmpty == false ? path : nil)
    }

    /// What went wrong and what to do, in words, then SQLite's codes and message (for a bug
    /// report): "the database file DIR/canopy.sqlite is read-only; check its permissions (SQLite
    /// error 8, extended 1544: attempt to write a readonly database)".
    public var description: String {
        let statement = sql.map { " in «\($0)»" } ?? ""
        let codes = "SQLite error \(code), extended \(extendedCode): \(message)\(statement)"
        guard let words = explanation else { return codes }
        return "\(words) (\(codes))"
    }

    /// The plain-words explanation of the primary code, or nil for codes a user cannot act on
    /// (those are bugs, and the codes say more).
    var explanation: String? {
        let file = databasePath.map { "the database file \($0)" } ?? "the database file"
        switch code {
        case SQLITE_READONLY:
            return "\(file) is read-only; check its permissions and those of its directory (and its -wal and -shm files)"
        case SQLITE_FULL: return "the disk holding \(file) is full; free some space and try again"
        case SQLITE_BUSY, SQLITE_LOCKED:
            return "\(file) is locked by another connection or process; make sure no other program has it open, then try again"
        case SQLITE_CORRUPT, SQLITE_NOTADB:
            return "\(file) is damaged or is not a Canopy database; restore it from a backup or copy the data from a peer"
        case SQLITE_IOERR: return "reading or writing \(file) failed; check the disk and the system log"
        case SQLITE_CANTOPEN:
            return "\(file) cannot be opened; check that its directory exists and that you may read and write there"
        case SQLITE_PERM, SQLITE_AUTH: return "access to \(file) was denied; check its permissions"
        case SQLITE_NOMEM: return "SQLite ran out of memory working on \(file)"
        case SQLITE_TOOBIG: return "a value is too large for \(file)"
        default: return nil
        }
    }
}
