import CSQLite
import CanopyCore

/// A value to bind to a statement parameter.
package enum SQLiteValue: Sendable, Equatable {
    case null
    case integer(Int64)
    case text(String)
    case blob([UInt8])
}

/// SQLite's "copy the bytes now" destructor marker: bound buffers need not outlive the call.
private let transientDestructor = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// A prepared statement owned by one `Database` and cached by its SQL text.
///
/// Invariant: between uses a statement is reset with its bindings cleared, so a cached statement
/// never carries a previous caller's values or holds a read lock open. `Database.cached` resets it
/// before handing it out.
package final class Statement {
    let handle: OpaquePointer
    /// The SQL text, reported in errors (bound values never are).
    package let sql: String
    private let connection: OpaquePointer

    init(connection: OpaquePointer, sql: String) throws(SQLiteError) {
        var statement: OpaquePointer?
        let result = sqlite3_prepare_v3(connection, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard result == SQLITE_OK, let statement else {
            throw SQLiteError(result: result, connection: connection, sql: sql)
        }
        self.handle = statement
        self.sql = sql
        self.connection = connection
    }

    deinit { sqlite3_finalize(handle) }

    /// Resets the statement and clears its bindings.
    package func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    /// Binds `values` to parameters 1, 2, … of a reset statement.
    package func bound(_ values: SQLiteValue...) throws(SQLiteError) -> Statement {
        try bind(values)
        return self
    }

    private func check(_ result: Int32) throws(SQLiteError) {
        guard result == SQLITE_OK else { throw SQLiteError(result: result, connection: connection, sql: sql) }
    }

    /// Binds `value` to the 1-based parameter `index`.
    package func bind(_ value: SQLiteValue, at index: Int32) throws(SQLiteError) {
        switch value {
        case .null: try check(sqlite3_bind_null(handle, index))
        case .integer(let number): try bind(number, at: index)
        case .text(let text): try bind(text, at: index)
        case .blob(let bytes): try bind(bytes, at: index)
        }
    }

    /// Binds an integer.
    package func bind(_ value: Int64, at index: Int32) throws(SQLiteError) {
        try check(sqlite3_bind_int64(handle, index, value))
    }

    /// Binds an integer.
    package func bind(_ value: Int, at index: Int32) throws(SQLiteError) {
        try bind(Int64(value), at: index)
    }

    /// Binds UTF-8 text.
    package func bind(_ value: String, at index: Int32) throws(SQLiteError) {
        var text = value
        let result = text.withUTF8 { utf8 -> Int32 in
            let start = UnsafeRawPointer(utf8.baseAddress ?? UnsafePointer(bitPattern: 1)!)
            return sqlite3_bind_text(handle, index, start.assumingMemoryBound(to: CChar.self), Int32(utf8.count), transientDestructor)
        }
        try check(result)
    }

    /// Binds `utf8` as text (the caller guarantees it is UTF-8).
    package func bind(utf8Text utf8: [UInt8], at index: Int32) throws(SQLiteError) {
        let result = utf8.withUnsafeBytes { raw in
            sqlite3_bind_text(handle, index, raw.baseAddress?.assumingMemoryBound(to: CChar.self) ?? UnsafePointer(bitPattern: 1),
                              Int32(raw.count), transientDestructor)
        }
        try check(result)
    }

    /// Binds a blob, or NULL when `value` is nil. An empty array binds a zero-length blob.
    package func bind(_ value: [UInt8]?, at index: Int32) throws(SQLiteError) {
        guard let value else { return try check(sqlite3_bind_null(handle, index)) }
        let result = value.withUnsafeBytes { raw in
            sqlite3_bind_blob(handle, index, raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(raw.count), transientDestructor)
        }
        try check(result)
    }

    /// Binds the 16 digest bytes of `revision` (nil binds NULL) without building an array: the
    /// hot paths bind two or three digests per revision written.
    package func bind(digestOf revision: RevisionID?, at index: Int32) throws(SQLiteError) {
        guard let revision else { return try check(sqlite3_bind_null(handle, index)) }
        var halves = (revision.digestHigh.bigEndian, revision.digestLow.bigEndian)
        let result = withUnsafeBytes(of: &halves) { raw in
            sqlite3_bind_blob(handle, index, raw.baseAddress, Int32(RevisionID.digestBytes), transientDestructor)
        }
        try check(result)
    }

    /// Binds a list of values to parameters 1, 2, ….
    package func bind(_ values: [SQLiteValue]) throws(SQLiteError) {
        for (offset, value) in values.enumerated() { try bind(value, at: Int32(offset + 1)) }
    }

    /// Advances the statement. Returns true when a row is available, false when done.
    @discardableResult
    package func step() throws(SQLiteError) -> Bool {
        let result = sqlite3_step(handle)
        switch result {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default:
            let error = SQLiteError(result: result, connection: connection, sql: sql)
            sqlite3_reset(handle)
            throw error
        }
    }

    /// Runs the statement to completion, ignoring any rows, then resets it.
    package func run() throws(SQLiteError) {
        defer { reset() }
        while try step() {}
    }

    /// A value `runBorrowing` binds without a copy.
    package enum Borrowed {
        /// A blob, or NULL for nil.
        case blob([UInt8]?)
        /// UTF-8 text.
        case text(String)
        /// The 16 digest bytes of a revision id, or NULL for nil (held in the binding call's frame).
        case digest(RevisionID?)
        /// The `LeafList` of a document with this one leaf (held in the binding call's frame: no
        /// array per new document).
        case singleLeafList(RevTree.Node)
    }

    /// Binds each value to its parameter without SQLite copying the bytes, runs the statement to
    /// completion, and resets it. Saves a heap copy (and SQLite's allocation lock) per value,
    /// which for 1 KiB bodies and many small rows is a measurable part of an insert.
    ///
    /// Safe because SQLite reads a borrowed (`SQLITE_STATIC`) buffer only while the statement
    /// runs, every buffer stays alive in the nested `withUnsafeBytes`/`withUTF8` scopes until it
    /// is done, and the reset when this returns (or throws) clears every binding, so no pointer
    /// to them outlives the call.
    package func runBorrowing(_ values: [(index: Int32, value: Borrowed)]) throws(SQLiteError) {
        defer { reset() }
        let outcome = values.withUnsafeBufferPointer { buffer in
            Result { () throws(SQLiteError) in try bindBorrowing(buffer, from: 0) }
        }
        try outcome.get()
    }

    /// Binds `values[position...]`, each inside the scope that keeps its bytes alive, then runs.
    private func bindBorrowing(
        _ values: UnsafeBufferPointer<(index: Int32, value: Borrowed)>, from position: Int
    ) throws(SQLiteError) {
        guard position < values.count else {
            while try step() {}
            return
        }
        let index = values[position].index
        let next = position + 1
        // A nil destructor is SQLITE_STATIC: SQLite uses the pointer as it is.
        let outcome: Result<Void, SQLiteError>
        switch values[position].value {
        case .blob(nil), .digest(nil):
            try check(sqlite3_bind_null(handle, index))
            return try bindBorrowing(values, from: next)
        case .blob(let bytes?):
            outcome = bytes.withUnsafeBytes { raw in
                Result { () throws(SQLiteError) in
                    try check(sqlite3_bind_blob(handle, index, raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(raw.count), nil))
                    try bindBorrowing(values, from: next)
                }
            }
        case .text(var text):
            outcome = text.withUTF8 { utf8 in
                Result { () throws(SQLiteError) in
                    let start = UnsafeRawPointer(utf8.baseAddress ?? UnsafePointer(bitPattern: 1)!)
                    try check(sqlite3_bind_text(handle, index, start.assumingMemoryBound(to: CChar.self), Int32(utf8.count), nil))
                    try bindBorrowing(values, from: next)
                }
            }
        case .singleLeafList(let leaf):
            var entry: (UInt64, UInt64, UInt64) = (0, 0, 0)
            outcome = withUnsafeMutableBytes(of: &entry) { raw in
                LeafList.store(leaf, into: raw, at: 0)
                return Result { () throws(SQLiteError) in
                    try check(sqlite3_bind_blob(handle, index, raw.baseAddress, Int32(LeafList.entryBytes), nil))
                    try bindBorrowing(values, from: next)
                }
            }
        case .digest(let revision?):
            var halves = (revision.digestHigh.bigEndian, revision.digestLow.bigEndian)
            outcome = withUnsafeBytes(of: &halves) { raw in
                Result { () throws(SQLiteError) in
                    try check(sqlite3_bind_blob(handle, index, raw.baseAddress, Int32(RevisionID.digestBytes), nil))
                    try bindBorrowing(values, from: next)
                }
            }
        }
        try outcome.get()
    }

    /// Whether column `index` (0-based) of the current row is NULL.
    package func isNull(_ index: Int32) -> Bool { sqlite3_column_type(handle, index) == SQLITE_NULL }

    /// Column `index` of the current row as an integer.
    package func int64(_ index: Int32) -> Int64 { sqlite3_column_int64(handle, index) }

    /// Column `index` of the current row as an `Int`.
    package func int(_ index: Int32) -> Int { Int(sqlite3_column_int64(handle, index)) }

    /// Column `index` of the current row as text (empty for NULL).
    package func text(_ index: Int32) -> String {
        guard let pointer = sqlite3_column_text(handle, index) else { return "" }
        let count = Int(sqlite3_column_bytes(handle, index))
        return String(decoding: UnsafeBufferPointer(start: pointer, count: count), as: UTF8.self)
    }

    /// Column `index` of the current row as text, or nil when its bytes are not valid UTF-8 (a
    /// damaged file): a stored id is never read with characters substituted.
    package func validText(_ index: Int32) -> String? {
        guard let pointer = sqlite3_column_text(handle, index) else { return "" }
        let count = Int(sqlite3_column_bytes(handle, index))
        return String(validating: UnsafeBufferPointer(start: pointer, count: count), as: UTF8.self)
    }

    /// Column `index` of the current row as raw bytes of its text (for reporting damage).
    package func textBytes(_ index: Int32) -> [UInt8] {
        guard let pointer = sqlite3_column_text(handle, index) else { return [] }
        return Array(UnsafeBufferPointer(start: pointer, count: Int(sqlite3_column_bytes(handle, index))))
    }

    /// Column `index` of the current row's text bytes in place, valid until the next step or reset.
    package func borrowedText(_ index: Int32) -> UnsafeRawBufferPointer {
        let count = Int(sqlite3_column_bytes(handle, index))
        guard count > 0, let pointer = sqlite3_column_text(handle, index) else { return UnsafeRawBufferPointer(start: nil, count: 0) }
        return UnsafeRawBufferPointer(start: pointer, count: count)
    }

    /// Column `index` of the current row read as the digest of a revision of `generation`; nil
    /// unless it is exactly 16 bytes and the generation is valid. Reads in place, no array.
    package func revisionID(generation: Int, digestColumn index: Int32) -> RevisionID? {
        guard (1...RevisionID.generationMax).contains(generation),
            sqlite3_column_bytes(handle, index) == Int32(RevisionID.digestBytes),
            let pointer = sqlite3_column_blob(handle, index)
        else { return nil }
        let high = UInt64(bigEndian: pointer.loadUnaligned(as: UInt64.self))
        let low = UInt64(bigEndian: pointer.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
        return RevisionID(generation: generation, digestHigh: high, digestLow: low)
    }

    /// Column `index` of the current row as bytes read in place (empty for NULL or no bytes):
    /// valid only until the statement steps or is reset, so never let it escape.
    package func borrowedBlob(_ index: Int32) -> UnsafeRawBufferPointer {
        let count = Int(sqlite3_column_bytes(handle, index))
        guard count > 0, let pointer = sqlite3_column_blob(handle, index) else { return UnsafeRawBufferPointer(start: nil, count: 0) }
        return UnsafeRawBufferPointer(start: pointer, count: count)
    }

    /// Column `index` of the current row as bytes, or nil for NULL.
    package func blob(_ index: Int32) -> [UInt8]? {
        if isNull(index) { return nil }
        let count = Int(sqlite3_column_bytes(handle, index))
        guard count > 0, let pointer = sqlite3_column_blob(handle, index) else { return [] }
        return Array(UnsafeRawBufferPointer(start: pointer, count: count))
    }
}
