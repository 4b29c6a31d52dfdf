import CanopyCore
import CanopyStore
import Dispatch

/// A local document database an application embeds: JSON documents kept as revision trees in one
/// SQLite file, read and written as `Codable` values, with optimistic concurrency, conflict
/// policies and a changes feed as an `AsyncSequence`. Shaped after Couchbase Lite's `Database`.
///
/// ```swift
/// let db = try Database(path: "notes.sqlite")
/// let rev = try db.save(Note(title: "Groceries", text: "milk"), id: "note:1")
/// let note = try db.document(id: "note:1", as: Note.self)
/// ```
///
/// Thread safety: every call may come from any thread or task; the store underneath serialises
/// them (one lock, one transaction per call). The type holds only immutable references, so it is
/// `Sendable` by construction. A synchronous call blocks its caller for the duration of one SQLite
/// transaction; in `async` code every call that reads or writes the file is awaited instead
/// (`Database+Async`): it runs on the database's own queue and holds no thread of Swift's
/// cooperative pool meanwhile.
public final class Database: Sendable {
    /// How a database is opened.
    public struct Configuration: Sendable {
        /// How conflicts made by revisions from peers are settled (`.automatic`: deletions win,
        /// then the longest history; `.manual`: kept for `resolveConflicts`; `.rules(…)`,
        /// `.custom(…)`). Changeable later through `Database.conflictResolution`.
        public var conflictResolution: ConflictPolicy
        /// Commits survive power loss (SQLite `synchronous=FULL`) instead of only a crash of the
        /// process (`NORMAL`, the default).
        public var durable: Bool
        /// How many ancestors each document keeps (persisted in the file); nil keeps the stored
        /// value, 1000 for a new file. Must lie within 2...100,000.
        public var revsLimit: Int?

        /// A configuration: automatic conflict resolution, crash-safe (not power-loss-safe)
        /// commits, the stored revision limit.
        public init(conflictResolution: ConflictPolicy = .automatic, durable: Bool = false, revsLimit: Int? = nil) {
            self.conflictResolution = conflictResolution
            self.durable = durable
            self.revsLimit = revsLimit
        }
    }

    /// The document store underneath, for the engine's own modules and tests. Writes made through
    /// it are seen by this database and its changes feed like any other.
    package let store: DocumentStore
    /// Where the awaited calls run (`Database+Async`): off the cooperative pool, one at a time.
    package let queue = DispatchQueue(label: "canopy.database")

    /// Opens the database at `path`, creating the file if it does not exist and migrating an
    /// older schema forward. Fails with `DatabaseError.storageFailed` when the file cannot be
    /// opened or was written by a newer Canopy (the file is then left untouched).
    public init(path: String, configuration: Configuration = Configuration()) throws(DatabaseError) {
        if let limit = configuration.revsLimit {
            guard (StoreLimits.revsLimitMin...StoreLimits.revsLimitMax).contains(limit) else {
                throw .invalidConfiguration(
                    "revsLimit \(limit) is outside \(StoreLimits.revsLimitMin)...\(StoreLimits.revsLimitMax)")
            }
        }
        let storeConfiguration = DocumentStore.Configuration(
            durable: configuration.durable, revsLimit: configuration.revsLimit,
            conflictPolicy: configuration.conflictResolution)
        do {
            store = try DocumentStore(path: path, configuration: storeConfiguration)
        } catch {
            throw DatabaseError(error, documentID: nil)
        }
    }

    /// Wraps a store already open (a `Node`'s, which its agent replicates).
    package init(store: DocumentStore) {
        self.store = store
    }

    /// How conflicts are settled from now on; a change applies to the next write, without
    /// reopening. On a ``Node``'s database a policy set here is the application's: it stays in
    /// force when the node reloads its config file (``Node/reload()``, `canopyctl reload`, SIGHUP)
    /// and when resolver clients come and go on its admin socket, instead of the file's
    /// `conflicts` and rules, until the node is opened again.
    public var conflictResolution: ConflictPolicy {
        get { store.conflictPolicy }
        set { store.conflictPolicy = newValue }
    }

    /// The ids of the documents that have kept conflicts (more than one open leaf), sorted by
    /// their UTF-8 bytes.
    public func conflictedDocumentIDs() throws(DatabaseError) -> [String] {
        do { return try store.conflictedDocumentIDs() } catch { throw DatabaseError(error, documentID: nil) }
    }

    /// Settles the kept conflict of `id` with `resolver` (for example `BuiltInResolver.mergeJSON`)
    /// and returns the document's new current revision. The resolver sees every open leaf, the
    /// current one first; a deletion is one of them, marked `ConflictLeaf.isDeleted`.
    @discardableResult
    public func resolveConflicts(id: String, resolver: any ConflictResolver) throws(DatabaseError) -> RevisionID {
        do { return try store.resolveConflicts(id: id, resolver: resolver) } catch { throw DatabaseError(error, documentID: id) }
    }

    /// The sequence of the latest change: the `since` that makes `changes(since:)` start with
    /// the changes still to come.
    public var lastSequence: Int64 { store.lastSequence }

    /// The digest of what the database holds, 64 hex digits: two databases (on two nodes, or
    /// two files) that hold the same documents with the same open leaves have the same digest,
    /// whatever order the revisions arrived in; any other difference changes it. Kept in every
    /// write transaction, so reading it costs nothing (`Protocol/digests.md`). It is what
    /// `canopyctl status` and `db list` show for the database.
    public var digest: String { store.digest.hex }
}
