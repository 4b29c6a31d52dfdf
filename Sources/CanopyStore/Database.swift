import CSQLite

/// One SQLite connection: the only place the store calls SQLite (`Protocol/design.md` §9.6).
///
/// Not thread-safe by itself; `DocumentStore` serialises every use behind its lock. The connection
/// runs in WAL mode with `synchronous=NORMAL` (a commit survives a process crash; the last commits
/// may be lost on power failure) or, with `durable: true`, `synchronous=FULL` (a commit survives
/// power failure too). Prepared statements are cached by SQL text.
package final class Database {
    let connection: OpaquePointer
    /// The file this connection opened.
    package let path: String
    private var statements: [String: Statement] = [:]
    /// Statements of the hot paths, keyed by the address of their static SQL text: looking one
    /// up costs no string hashing (hashing a few hundred bytes of SQL per call showed up as 8% of
    /// a replication batch's CPU time).
    private var staticStatements: [UnsafeRawPointer: Statement] = [:]
    /// Statements whose SQL is built at run time (multi-row INSERTs), keyed by a short name so a
    /// lookup hashes the name, not kilobytes of generated SQL.
    private var namedStatements: [String: Statement] = [:]
    /// Told the WAL size after every commit when it replaced automatic checkpoints.
    var walObserver: (any WALCommitObserver)?

    /// Opens (creating if needed) the database at `path` and applies the connection settings.
    package init(path: String, durable: Bool = false) throws(SQLiteError) {
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let result = sqlite3_open_v2(path, &handle, flags, nil)
        guard result == SQLITE_OK, let handle else {
            let error = SQLiteError(result: result, connection: handle, sql: nil)
            sqlite3_close_v2(handle)
            throw error
        }
        self.connection = handle
        self.path = path
        sqlite3_extended_result_codes(handle, 1)
        sqlite3_busy_timeout(handle, StoreLimits.busyTimeoutMilliseconds)
        try execute("PRAGMA journal_mode=WAL")
        // FULL syncs the WAL on every commit; NORMAL only at checkpoints (still crash-safe in WAL).
        try execute(durable ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL")
        // Foreign keys stay off (SQLite's default): enforcing `revisions.doc_key` costs a lookup in
        // `documents` per revision written, and the store always writes a document's row first.
        // A larger page cache keeps the indexes of a large store in memory (16 MiB).
        try execute("PRAGMA cache_size=-16384")
    }

    /// A second connection to the database at `path` that only reads (`PRAGMA query_only`), with
    /// a smaller page cache (4 MiB): it looks documents up by id, and shares the file's pages
    /// through the operating system's cache anyway.
    static func snapshotReader(path: String) throws(SQLiteError) -> Database {
        let reader = try Database(path: path)
        try reader.execute("PRAGMA query_only=1; PRAGMA cache_size=-4096")
        return reader
    }

    deinit {
        statements.removeAll()
        staticStatements.removeAll()
        namedStatements.removeAll()
        sqlite3_close_v2(connection)
    }

    /// Runs one or more SQL statements that take no parameters (schema, pragmas).
    package func execute(_ sql: String) throws(SQLiteError) {
        let result = sqlite3_exec(connection, sql, nil, nil, nil)
        guard result == SQLITE_OK else { throw SQLiteError(result: result, connection: connection, sql: sql) }
    }

    /// The cached prepared statement for `sql`, reset with its bindings cleared.
    package func cached(_ sql: String) throws(SQLiteError) -> Statement {
        if let statement = statements[sql] {
            statement.reset()
            return statement
        }
        let statement = try Statement(connection: connection, sql: sql)
        if statements.count >= StoreLimits.statementCacheCountMax { statements.removeAll() }
        statements[sql] = statement
        return statement
    }

    /// The cached prepared statement for a static SQL text, reset with its bindings cleared.
    package func statement(_ sql: StaticString) throws(SQLiteError) -> Statement {
        let key = UnsafeRawPointer(sql.utf8Start)
        if let statement = staticStatements[key] {
            statement.reset()
            return statement
        }
        let statement = try Statement(connection: connection, sql: sql.description)
        staticStatements[key] = statement
        return statement
    }

    /// The cached prepared statement named `name`, prepared from `sql()` on first use, reset with
    /// its bindings cleared. A name must always stand for the same SQL; the set of names is fixed
    /// by the code (never derived from input), so this cache needs no bound.
    package func statement(named name: String, sql: () -> String) throws(SQLiteError) -> Statement {
        if let statement = namedStatements[name] {
            statement.reset()
            return statement
        }
        let statement = try Statement(connection: connection, sql: sql())
        namedStatements[name] = statement
        return statement
    }

    /// Runs `sql` with `values` bound, discarding any rows.
    package func run(_ sql: String, _ values: SQLiteValue...) throws(SQLiteError) {
        let statement = try cached(sql)
        try statement.bind(values)
        try statement.run()
    }

    /// Runs `sql` with `values` bound and maps every row with `row`.
    package func query<T>(
        _ sql: String, _ values: [SQLiteValue] = [], row: (Statement) throws -> T
    ) throws -> [T] {
        let statement = try cached(sql)
        defer { statement.reset() }
        try statement.bind(values)
        var rows: [T] = []
        while try statement.step() { rows.append(try row(statement)) }
        return rows
    }

    /// The first row of `sql` mapped with `row`, or nil when there is none.
    package func queryFirst<T>(
        _ sql: String, _ values: [SQLiteValue] = [], row: (Statement) throws -> T
    ) throws -> T? {
        let statement = try cached(sql)
        defer { statement.reset() }
        try statement.bind(values)
        return try statement.step() ? try row(statement) : nil
    }

    /// The integer in the first column of the first row of `sql`, or nil.
    package func scalarInt(_ sql: String, _ values: SQLiteValue...) throws -> Int64? {
        try queryFirst(sql, values) { $0.isNull(0) ? nil : $0.int64(0) } ?? nil
    }

    /// Whether a transaction is open on this connection.
    package var inTransaction: Bool { sqlite3_get_autocommit(connection) == 0 }

    /// Runs `body` in an immediate transaction: commits when it returns, rolls back when it throws
    /// and rethrows that first error (a failing rollback never hides it). Not reentrant.
    package func transaction<T>(_ body: (Database) throws -> T) throws -> T {
        precondition(!inTransaction, "Database.transaction is not reentrant")
        try execute("BEGIN IMMEDIATE")
        let value: T
        do {
            value = try body(self)
        } catch {
            rollback()
            throw error
        }
        do {
            try execute("COMMIT")
        } catch {
            rollback()
            throw error
        }
        return value
    }

    /// Runs `body` in a deferred transaction that only reads: its statements share one snapshot
    /// and one WAL read lock instead of taking and dropping it (two `fcntl` calls) per statement,
    /// which dominated batch reads of many documents. Ends with COMMIT, or ROLLBACK when `body`
    /// throws (rethrowing that error). Not reentrant.
    package func readTransaction<T>(_ body: (Database) throws -> T) throws -> T {
        precondition(!inTransaction, "Database.readTransaction is not reentrant")
        try cached("BEGIN DEFERRED").run()
        let value: T
        do {
            value = try body(self)
        } catch {
            rollback()
            throw error
        }
        do {
            try cached("COMMIT").run()
        } catch {
            rollback()
            throw error
        }
        return value
    }

    private func rollback() {
        // The first error is what the caller needs; a rollback failure (e.g. the transaction was
        // already rolled back by SQLite itself) adds nothing.
        if inTransaction { _ = sqlite3_exec(connection, "ROLLBACK", nil, nil, nil) }
    }

    /// The value of an integer pragma, e.g. `synchronous` or `user_version`.
    package func pragmaInt(_ name: String) throws -> Int64 {
        try scalarInt("PRAGMA \(name)") ?? 0
    }

    /// Rows changed by the last INSERT, UPDATE or DELETE.
    package var changes: Int { Int(sqlite3_changes(connection)) }

    /// The rowid of the last successful INSERT.
    package var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(connection) }
}
