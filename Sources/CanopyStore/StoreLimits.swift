/// Every limit the document store enforces, in one place (`Protocol/design.md` §9.4). Each is checked before the
/// store allocates or writes anything for the input it bounds; exceeding one fails the whole call
/// with a typed `StoreInputError` naming the document and the limit.
public enum StoreLimits {
    /// Largest document id, in UTF-8 bytes (`Protocol/design.md` §2.1: ids are 1–1024 bytes).
    public static let documentIDBytesMax = 1024
    /// Largest document body, in canonical JSON bytes. CouchDB's default `max_document_size` is
    /// 8 MB; 16 MiB leaves room for large documents while bounding what one revision can cost.
    public static let bodyBytesMax = 16 * 1024 * 1024
    /// Deepest JSON nesting accepted in a body (the same bound the JSON parser applies).
    public static let bodyDepthMax = 256
    /// Default number of ancestors kept per leaf (PouchDB's and CouchDB's default `revs_limit`).
    public static let revsLimitDefault = 1000
    /// Smallest `revsLimit` a store accepts: a leaf and its parent, so that a conflict's common
    /// ancestor can survive stemming at least one edit deep.
    public static let revsLimitMin = 2
    /// Largest `revsLimit` a store accepts (also bounds how long a received history may be).
    public static let revsLimitMax = 100_000
    /// Most revisions accepted in one `bulkInsertForeign` call; a replication batch is far smaller
    /// (1000 by default), this only stops a caller from building an unbounded transaction.
    public static let foreignBatchCountMax = 100_000
    /// Largest `_bulk_docs` body `importBulkDocs` accepts, in bytes (it is parsed in memory).
    public static let bulkDocsBytesMax = 256 * 1024 * 1024
    /// Most entries `changes(since:limit:)` returns in one call.
    public static let changesLimitMax = 100_000
    /// Largest local-document id, in UTF-8 bytes.
    public static let localIDBytesMax = 1024
    /// Largest local-document body, in canonical JSON bytes (checkpoints and settings are small).
    public static let localBodyBytesMax = 1024 * 1024
    /// How long a connection waits for a lock held by another connection before failing with
    /// `SQLITE_BUSY`, in milliseconds.
    public static let busyTimeoutMilliseconds: Int32 = 5_000
    /// Prepared statements kept per connection. The store uses a fixed set of fewer than 40
    /// statements; the bound only stops ad hoc SQL from growing the cache without limit.
    public static let statementCacheCountMax = 128
    /// WAL frames not yet in the database file that start a background checkpoint
    /// (`Configuration.checkpointInBackground`; SQLite's default `wal_autocheckpoint`).
    public static let walBackgroundCheckpointFrames = 1_000
    /// WAL frames at which the writer checkpoints itself when checkpoints run in the background:
    /// the WAL's bound (32 MiB of 4 KiB pages, plus the transaction that crossed it).
    public static let walInlineCheckpointFrames = 8_000
}
