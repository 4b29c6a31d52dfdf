import CSQLite
import Testing
@testable import CanopyStore

@Suite("SQLite wrapper")
struct DatabaseTests {
    @Test("a transaction that throws rolls back and rethrows the first error")
    func transactionRollsBack() throws {
        let directory = TemporaryDirectory()
        let db = try Database(path: directory.path("db.sqlite"))
        try db.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
        struct Boom: Error {}
        #expect(throws: Boom.self) {
            try db.transaction { db in
                try db.run("INSERT INTO t(x) VALUES (?)", .integer(1))
                throw Boom()
            }
        }
        #expect(try db.scalarInt("SELECT count(*) FROM t") == 0)
        #expect(!db.inTransaction)
        try db.transaction { db in try db.run("INSERT INTO t(x) VALUES (?)", .integer(2)) }
        #expect(try db.scalarInt("SELECT count(*) FROM t") == 1)
    }

    @Test("once SQLite is in use, turning its memory statistics off is refused and changes nothing")
    func memoryStatisticsAfterFirstUse() throws {
        let directory = TemporaryDirectory()
        let db = try Database(path: directory.path("db.sqlite"))
        try db.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
        #expect(!Database.disableMemoryStatistics())
        // Statistics still counting: the open connection's memory shows.
        #expect(sqlite3_memory_used() > 0)
    }

    @Test("borrowed blobs are stored intact and no binding to them survives the call")
    func borrowedBlobs() throws {
        let directory = TemporaryDirectory()
        let db = try Database(path: directory.path("db.sqlite"))
        try db.execute("CREATE TABLE t (n INTEGER, a BLOB, b BLOB, c BLOB, d TEXT, e BLOB, f BLOB)")
        let insert = try db.cached("INSERT INTO t(n, a, b, c, d, e, f) VALUES (?, ?, ?, ?, ?, ?, ?)")
        try insert.bind(1, at: 1)
        let revision = chain(1)[0].id
        try insert.runBorrowing([
            (2, .blob(Array(0...255))), (3, .blob(nil)), (4, .blob([])), (5, .text("é漢😀")), (6, .digest(revision)), (7, .digest(nil)),
        ])
        // Run again without binding: every parameter must be NULL, not the buffers lent above.
        try insert.run()
        let rows = try db.query("SELECT n, a, b, c, d, e, f FROM t ORDER BY rowid") { row in
            [row.blob(1), row.blob(2), row.blob(3), row.isNull(4) ? nil : Array(row.text(4).utf8), row.blob(5), row.blob(6)]
        }
        #expect(rows == [[Array(0...255), nil, [], Array("é漢😀".utf8), revision.digest, nil], [nil, nil, nil, nil, nil, nil]])
    }

    @Test("an SQLite error carries the codes and the SQL text but not the bound values")
    func errorCarriesContext() throws {
        let directory = TemporaryDirectory()
        let db = try Database(path: directory.path("db.sqlite"))
        try db.execute("CREATE TABLE t (x TEXT PRIMARY KEY)")
        try db.run("INSERT INTO t(x) VALUES (?)", .text("secret-value"))
        do {
            try db.run("INSERT INTO t(x) VALUES (?)", .text("secret-value"))
            Issue.record("a duplicate key was accepted")
        } catch {
            #expect(error.code == SQLITE_CONSTRAINT)
            #expect(error.extendedCode == SQLITE_CONSTRAINT | (6 << 8))  // SQLITE_CONSTRAINT_PRIMARYKEY
            #expect(error.sql == "INSERT INTO t(x) VALUES (?)")
            #expect(!error.description.contains("secret-value"))
        }
        #expect(throws: SQLiteError.self) { try db.execute("SELEKT 1") }
    }

    @Test("a cached statement is reset with cleared bindings before it is reused")
    func cachedStatementsAreReset() throws {
        let directory = TemporaryDirectory()
        let db = try Database(path: directory.path("db.sqlite"))
        let first = try db.query("SELECT ?", [.integer(7)]) { $0.int(0) }
        let second = try db.query("SELECT ?", []) { $0.isNull(0) }
        #expect(first == [7])
        #expect(second == [true])
        #expect(try db.cached("SELECT ?") === db.cached("SELECT ?"))
    }

    @Test("blobs, text and integers round-trip, including empty blobs and NULL")
    func typedValuesRoundTrip() throws {
        let directory = TemporaryDirectory()
        let db = try Database(path: directory.path("db.sqlite"))
        try db.execute("CREATE TABLE t (a BLOB, b TEXT, c INTEGER, d BLOB)")
        try db.run("INSERT INTO t VALUES (?, ?, ?, ?)", .blob([0, 1, 255]), .text("é\u{0}x"), .integer(-5), .blob([]))
        let row = try db.queryFirst("SELECT a, b, c, d, NULL FROM t") { ($0.blob(0), $0.text(1), $0.int64(2), $0.blob(3), $0.blob(4)) }
        #expect(row?.0 == [0, 1, 255])
        #expect(row?.1 == "é\u{0}x")
        #expect(row?.2 == -5)
        #expect(row?.3 == [])
        #expect(row?.4 == nil)
    }

    @Test("connections use WAL, NORMAL sync by default and FULL when durable")
    func synchronousModes() throws {
        let directory = TemporaryDirectory()
        let normal = try Database(path: directory.path("a.sqlite"))
        #expect(try normal.queryFirst("PRAGMA journal_mode") { $0.text(0) } == "wal")
        #expect(try normal.pragmaInt("synchronous") == 1)
        let durable = try Database(path: directory.path("b.sqlite"), durable: true)
        #expect(try durable.pragmaInt("synchronous") == 2)
    }

    @Test("a store opened with durable: true uses synchronous=FULL")
    func durableStore() throws {
        #expect(try TestStore(.init(durable: true)).store.synchronousMode == 2)
        #expect(try TestStore().store.synchronousMode == 1)
    }
}
