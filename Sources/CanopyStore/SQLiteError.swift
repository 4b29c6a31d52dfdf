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

    /// Creates an error from its parts.
    public init(code: Int32, extendedCode: Int32, message: String, sql: String?) {
        self.code = code
        self.extendedCode = extendedCode
        self.message = message
        self.sql = sql
    }

    /// Reads the error state of `connection` after a call returned `result`.
    init(result: Int32, connection: OpaquePointer?, sql: String?) {
        let extended = connection.map { sqlite3_extended_errcode($0) } ?? result
        let message = connection.flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) }
            ?? String(cString: sqlite3_errstr(result))
        self.init(code: result & 0xff, extendedCode: extended, message: message, sql: sql)
    }

    public var description: String {
        let statement = sql.map { " in «\($0)»" } ?? ""
        return "SQLite error \(code) (extended \(extendedCode)): \(message)\(statement)"
    }
}
