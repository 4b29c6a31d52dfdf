import CSQLite
import Testing

@testable import CanopyStore

@Suite("SQLite errors say what is wrong in words")
struct SQLiteErrorTests {
    @Test("a write to a read-only database names the file, says to check permissions, and keeps the codes")
    func readOnly() throws {
        let directory = TemporaryDirectory()
        let path = directory.path("canopy.sqlite")
        let db = try Database(path: path)
        try db.execute("CREATE TABLE t (x INTEGER)")
        try db.execute("PRAGMA query_only=1")
        do {
            try db.execute("INSERT INTO t VALUES (1)")
            Issue.record("a write to a query-only database succeeded")
        } catch {
            #expect(error.code == SQLITE_READONLY)
            #expect(error.description.hasPrefix("the database file \(path) is read-only; check its permissions"), "\(error)")
            #expect(error.description.contains("SQLite error 8"))
        }
    }

    @Test("full disk, busy, corrupt and I/O errors are explained; other codes keep SQLite's own words")
    func explanations() {
        func describe(_ code: Int32) -> String {
            SQLiteError(code: code, extendedCode: code, message: "m", sql: nil, databasePath: "/d/canopy.sqlite").description
        }
        #expect(describe(SQLITE_FULL).hasPrefix("the disk holding the database file /d/canopy.sqlite is full"))
        #expect(describe(SQLITE_BUSY).contains("is locked by another connection or process"))
        #expect(describe(SQLITE_CORRUPT).contains("is damaged"))
        #expect(describe(SQLITE_NOTADB).contains("is not a Canopy database"))
        #expect(describe(SQLITE_IOERR).hasPrefix("reading or writing the database file /d/canopy.sqlite failed"))
        #expect(describe(SQLITE_CONSTRAINT) == "SQLite error 19, extended 19: m")
    }
}
