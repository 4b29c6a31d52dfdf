import Foundation

/// The `metadata` table: the database id (16 bytes made once, random unless the configuration
/// names them), `revs_limit` and `last_sequence`. Keys are fixed strings; values are typed per key.
enum Metadata {
    /// The metadata as read at open.
    struct Values {
        let databaseID: UUID
        let revsLimit: Int
        let lastSequence: Int64
    }

    private static let databaseIDKey = "database_id"
    private static let revsLimitKey = "revs_limit"
    private static let lastSequenceKey = "last_sequence"

    /// Reads the metadata, creating it on a new file; persists `revsLimit` when given. A new file
    /// gets `newDatabaseID` as its id, or 16 bytes from the system generator when it is nil; an
    /// existing file keeps its own.
    static func loadOrCreate(_ db: Database, revsLimit: Int?, newDatabaseID: UUID? = nil) throws -> Values {
        try db.transaction { db in
            if try blob(db, databaseIDKey) == nil {
                let bytes: [UInt8]
                if let newDatabaseID {
                    bytes = withUnsafeBytes(of: newDatabaseID.uuid) { Array($0) }
                } else {
                    var generator = SystemRandomNumberGenerator()
                    bytes = (0..<16).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
                }
                try db.run("INSERT INTO metadata(key, value) VALUES (?, ?)", .text(databaseIDKey), .blob(bytes))
                try setRevsLimit(db, StoreLimits.revsLimitDefault)
                try setLastSequence(db, 0)
            }
            if let revsLimit { try setRevsLimit(db, revsLimit) }
            guard let idBytes = try blob(db, databaseIDKey), idBytes.count == 16,
                let limit = try integer(db, revsLimitKey), let sequence = try integer(db, lastSequenceKey)
            else { throw StoreError.corrupt(detail: "metadata table is incomplete") }
            let id = idBytes.withUnsafeBytes { raw in UUID(uuid: raw.loadUnaligned(as: uuid_t.self)) }
            return Values(databaseID: id, revsLimit: Int(limit), lastSequence: sequence)
        }
    }

    static func setRevsLimit(_ db: Database, _ limit: Int) throws {
        try set(db, revsLimitKey, .integer(Int64(limit)))
    }

    static func setLastSequence(_ db: Database, _ sequence: Int64) throws {
        try set(db, lastSequenceKey, .integer(sequence))
    }

    private static func set(_ db: Database, _ key: String, _ value: SQLiteValue) throws {
        try db.run(
            "INSERT INTO metadata(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            .text(key), value)
    }

    private static func blob(_ db: Database, _ key: String) throws -> [UInt8]? {
        try db.queryFirst("SELECT value FROM metadata WHERE key = ?", [.text(key)]) { $0.blob(0) } ?? nil
    }

    private static func integer(_ db: Database, _ key: String) throws -> Int64? {
        try db.queryFirst("SELECT value FROM metadata WHERE key = ?", [.text(key)]) { $0.isNull(0) ? nil : $0.int64(0) } ?? nil
    }
}
