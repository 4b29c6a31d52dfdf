import CSodium
import CanopyCore
import Foundation
import Logging
import Synchronization

/// Canopy's document database: one SQLite file holding revision trees, bodies, the changes index
/// and local documents. This is the local API an application embeds, and what replication reads
/// and writes.
///
/// Thread safety: every call takes one lock and runs to completion under it, so calls from any
/// thread are serialised; SQLite is reached only through `read { }` and `write { }` (`Protocol/design.md` §9.6).
/// Conflict handlers and resolvers run under that lock and must not call back into the store.
///
/// Invariants kept by every write transaction:
/// - `documents.sequence` is unique and equals the sequence of the document's latest change;
///   `metadata.last_sequence` is the largest sequence ever assigned.
/// - `documents.current_*`, `deleted`, `conflicted`, `leaves` and `revisions.leaf` agree with the
///   document's revision tree as `RevTree` computes it.
public final class DocumentStore: @unchecked Sendable {
    /// How a store is opened.
    public struct Configuration: Sendable {
        /// `synchronous=FULL` (a commit survives power loss) instead of `NORMAL` (survives a crash).
        public var durable: Bool
        /// A new `revsLimit` to persist, or nil to keep the stored one (1000 for a new file).
        public var revsLimit: Int?
        /// What happens when foreign revisions make a document conflicted (`Protocol/design.md` §3).
        public var conflictPolicy: ConflictPolicy
        /// Where the store logs; the store never bootstraps logging.
        public var logger: Logger
        /// WAL checkpoints run on a second connection on a background queue instead of inside the
        /// commits that fill the WAL (`BackgroundCheckpointer`): for a process that writes large
        /// batches and has other work to do meanwhile, such as an agent receiving replication.
        public var checkpointInBackground: Bool
        /// The id a new file gets (nil: 16 bytes from the system random generator). Used only
        /// when the file is created; an existing file keeps its id. The simulator passes ids drawn
        /// from its seed, so that a run replays exactly.
        public var databaseID: UUID?
        /// Storage faults on demand (`StoreFaultInjector`), for tests and the simulator; nil in
        /// production.
        public var faultInjector: (any StoreFaultInjector)?
        /// Run the retry pass (`retryConflictResolution`) when the store opens, so that conflicts
        /// a failed resolver left are settled as soon as the policy can (when it is not `.manual`).
        /// An embedder that wants the pass's results (the agent offers them to its resolvers)
        /// turns this off and calls it itself.
        public var retriesConflictsOnOpen: Bool
        /// Where attachment content is kept (`AttachmentStore`); nil: beside the file, in
        /// `PATH-attachments` (created when the first attachment is stored). An agent gives all
        /// its databases one directory, so content is stored once per node.
        public var attachmentsDirectory: String?
        /// The largest attachment accepted, in bytes.
        public var attachmentSizeLimit: Int64

        /// A configuration with the defaults: NORMAL sync, stored revsLimit, automatic policy,
        /// SQLite's own checkpoints, a random database id for a new file, no injected faults,
        /// attachments beside the file up to 4 GiB each.
        public init(
            durable: Bool = false, revsLimit: Int? = nil, conflictPolicy: ConflictPolicy = .automatic,
            logger: Logger = Logger(label: "canopy.store"), checkpointInBackground: Bool = false,
            databaseID: UUID? = nil, faultInjector: (any StoreFaultInjector)? = nil, retriesConflictsOnOpen: Bool = true,
            attachmentsDirectory: String? = nil, attachmentSizeLimit: Int64 = AttachmentStore.defaultSizeLimit
        ) {
            self.attachmentsDirectory = attachmentsDirectory
            self.attachmentSizeLimit = attachmentSizeLimit
            self.durable = durable
            self.revsLimit = revsLimit
            self.conflictPolicy = conflictPolicy
            self.logger = logger
            self.checkpointInBackground = checkpointInBackground
            self.databaseID = databaseID
            self.faultInjector = faultInjector
            self.retriesConflictsOnOpen = retriesConflictsOnOpen
        }
    }

    let lock = NSLock()
    /// Commit observers, under their own lock so they can be called without the store's.
    let observers = CommitObservers()
    /// Damage reads found in the file (`StoredDamage`).
    let damage = DamageLedger()
    let db: Database
    let configuration: Configuration
    var logger: Logger { configuration.logger }
    /// The conflict policy in force (`conflictPolicy`), starting as the configuration's, and
    /// whether the application set it through `conflictPolicy` (then an embedder's configured
    /// policy, `applyConfiguredPolicy`, no longer replaces it).
    private let policy: Mutex<(policy: ConflictPolicy, setByApplication: Bool)>
    /// The store's permanent 16-byte identity (made once when the file is created: random, or
    /// `Configuration.databaseID`).
    public let databaseID: UUID
    /// The attachment content this store's revisions name.
    public let attachments: AttachmentStore
    /// Cached `metadata.revs_limit`; changed only under the lock, read without it (replication
    /// reads it on the snapshot path, which must not wait for a write in progress).
    private let storedRevsLimit = Atomic<Int>(0)
    /// Cached peer horizons (`PeerHorizons`), keyed by peer; changed only under the lock, after
    /// the transaction that wrote them committed.
    private var storedHorizons: [String: Int64]
    /// The lowest of `storedHorizons` (nil when there is none), kept with it so that a write does
    /// not scan the horizons.
    private var storedStemHorizon: Int64?
    /// Cached `metadata.last_sequence`; changed only under the lock, after a commit, and read
    /// without it (a replication source asks it while this node writes).
    private let storedLastSequence = Atomic<Int64>(0)
    /// The digest buckets as committed (`DigestBuckets`); changed only under the store's lock,
    /// after a commit, and read under their own, so counts never wait behind a long read.
    private let storedBuckets = Mutex(DigestBuckets.empty)
    /// Writes that set revisions aside for their attachment content (`setAsideCount`).
    let setAsideCounter = Atomic<Int>(0)
    /// Guards `snapshotConnection`; never taken together with `lock`.
    private let snapshotLock = NSLock()
    /// The second connection batched reads use (`readSnapshot`), opened with the store (the path
    /// may not name the file later); nil when the database is not in WAL mode (in memory),
    /// where a reader would wait for the writer anyway.
    private let snapshotConnection: Database?

    /// libsodium initialised once per process before the store hashes anything: its documentation
    /// requires `sodium_init` first, and only then does it pick the fastest BLAKE2b for this CPU
    /// (revision ids are hashed on every foreign insert and local write).
    private static let sodiumReady: Void = { precondition(sodium_init() >= 0, "libsodium failed to initialise") }()

    /// Opens or creates the store at `path`, migrating an older schema forward. A file written by
    /// a newer build fails with `StoreError.schemaTooNew` and is left untouched.
    public init(path: String, configuration: Configuration = Configuration()) throws(StoreError) {
        if let limit = configuration.revsLimit {
            precondition((StoreLimits.revsLimitMin...StoreLimits.revsLimitMax).contains(limit), "revsLimit out of range")
        }
        self.configuration = configuration
        policy = Mutex((configuration.conflictPolicy, false))
        attachments = AttachmentStore(
            directory: configuration.attachmentsDirectory ?? path + "-attachments", sizeLimit: configuration.attachmentSizeLimit)
        _ = Self.sodiumReady
        do {
            db = try Database(path: path, durable: configuration.durable)
            let version = try db.pragmaInt("user_version")
            try Schema.migrate(db)
            if version == 0 {
                configuration.logger.debug("store created", metadata: ["path": "\(path)"])
            } else if version < Schema.currentVersion {
                configuration.logger.info(
                    "store schema migrated", metadata: ["path": "\(path)", "from": "\(version)", "to": "\(Schema.currentVersion)"])
            }
            // Replication's batched reads need SQLite's JSON functions (built in since 3.38): a
            // library without them fails here, at open, not in the middle of a replication.
            try db.execute("SELECT key FROM json_each('[]')")
            let meta = try Metadata.loadOrCreate(db, revsLimit: configuration.revsLimit, newDatabaseID: configuration.databaseID)
            databaseID = meta.databaseID
            storedRevsLimit.store(meta.revsLimit, ordering: .releasing)
            storedLastSequence.store(meta.lastSequence, ordering: .releasing)
            storedHorizons = try PeerHorizons.load(db)
            storedStemHorizon = storedHorizons.values.min()
            let buckets = try DigestBuckets.load(db)
            storedBuckets.withLock { $0 = buckets }
            let wal = try db.queryFirst("PRAGMA journal_mode") { $0.text(0) } == "wal"
            snapshotConnection = wal ? try Database.snapshotReader(path: path) : nil
            if configuration.checkpointInBackground {
                db.replaceAutomaticCheckpoints(with: try BackgroundCheckpointer(
                    path: path, durable: configuration.durable, logger: configuration.logger))
            }
        } catch {
            throw StoreError.wrap(error)
        }
        if configuration.retriesConflictsOnOpen && configuration.conflictPolicy.settlesKeptConflicts {
            _ = try retryConflictResolution()
        }
    }

    /// How conflicts are settled from now on: each write transaction reads it once when it
    /// starts, so a change applies to the next batch, import or retry pass, without reopening.
    /// A policy set here is the application's: an agent running the store (a `Node`'s) keeps it
    /// when its config is reloaded, instead of the config file's (`applyConfiguredPolicy`).
    public var conflictPolicy: ConflictPolicy {
        get { policy.withLock { $0.policy } }
        set { policy.withLock { $0 = (newValue, true) } }
    }

    /// Sets the policy an embedder's configuration gives (an agent's config file: its rules,
    /// catch-all and connected resolvers' prefixes), unless the application set one through
    /// `conflictPolicy`, which stays in force: a reload must not replace, without a word, the
    /// resolver an application installed in its process. Returns whether it was applied.
    @discardableResult
    package func applyConfiguredPolicy(_ configured: ConflictPolicy) -> Bool {
        policy.withLock { current in
            guard !current.setByApplication else { return false }
            current.policy = configured
            return true
        }
    }

    /// Runs `body` under the store's lock, outside any transaction (each statement sees committed
    /// data; use `write` when several reads must agree with each other and with writes).
    func read<T>(_ body: (Database) throws -> T) throws(StoreError) -> T {
        lock.lock()
        defer { lock.unlock() }
        do { return try body(db) } catch { throw reported(StoreError.wrap(error)) }
    }

    /// `error`, after reporting the damage it names (`StoredDamage`) through the damage handler.
    func reported(_ error: StoreError) -> StoreError {
        if case .damaged(let damage) = error { self.damage.report(damage) }
        return error
    }

    /// `read` for batches (many documents per call): `body` runs in one read transaction, so its
    /// statements share a snapshot and the WAL read lock is taken once. `readSnapshot` falls back
    /// to it where the store has no second connection.
    func readBatch<T>(_ body: (Database) throws -> T) throws(StoreError) -> T {
        try read { db in try db.readTransaction(body) }
    }

    /// `readBatch` on the store's second connection: `body` reads the last committed snapshot in
    /// one read transaction, under its own lock, and never waits for a write transaction in
    /// progress (in WAL mode a reader and the writer run at once). Replication's batched reads
    /// (revision diffs, the changes feed, revisions to send) use it, so that a node answers a
    /// peer's `changes` while it writes the revisions of an earlier batch. A read sees every
    /// transaction committed before it began, as `read` would; only a write still in progress is
    /// invisible to it instead of waited for.
    func readSnapshot<T>(_ body: (Database) throws -> T) throws(StoreError) -> T {
        guard let snapshotConnection else { return try readBatch(body) }
        snapshotLock.lock()
        defer { snapshotLock.unlock() }
        do {
            return try snapshotConnection.readTransaction(body)
        } catch {
            throw reported(StoreError.wrap(error))
        }
    }

    /// Runs `body` in one transaction under the store's lock: all of it is committed, or none.
    /// The sequence counter advanced inside is persisted in the same transaction.
    /// Commit observers are told after the lock is released, when the sequence advanced.
    ///
    /// A `faultInjector` is consulted just before the COMMIT (under the lock: it can fail the
    /// transaction, which then rolls back) and just after it (outside the lock: it can make the
    /// committed write throw, as a process killed inside its commit never returns).
    func write<T>(_ body: (WriteContext) throws -> T) throws(StoreError) -> T {
        let (value, advanced) = try writeLocked(body)
        if let injector = configuration.faultInjector {
            do { try injector.afterCommit() } catch { throw StoreError.wrap(error) }
        }
        if advanced { notifyCommitObservers() }
        return value
    }

    /// `write` without the observers; also returns whether the sequence advanced.
    private func writeLocked<T>(_ body: (WriteContext) throws -> T) throws(StoreError) -> (T, advanced: Bool) {
        lock.lock()
        defer { lock.unlock() }
        do {
            let before = storedLastSequence.load(ordering: .acquiring)
            let revsLimit = storedRevsLimit.load(ordering: .acquiring)
            let context = WriteContext(
                db: db, lastSequence: before, revsLimit: revsLimit,
                peerHorizons: storedHorizons, stemHorizon: storedStemHorizon, buckets: digestBuckets, logger: logger)
            let value = try db.transaction { _ in
                let value = try body(context)
                if let buckets = context.buckets { try buckets.write(db, changed: context.changedBucketList) }
                try DigestIndex.insert(db, context.newDocumentIDs)
                if context.lastSequence != before { try Metadata.setLastSequence(db, context.lastSequence) }
                if context.revsLimit != revsLimit { try Metadata.setRevsLimit(db, context.revsLimit) }
                try configuration.faultInjector?.beforeCommit()
                return value
            }
            storedLastSequence.store(context.lastSequence, ordering: .releasing)
            storedRevsLimit.store(context.revsLimit, ordering: .releasing)
            if let buckets = context.buckets { storedBuckets.withLock { $0 = buckets } }
            if !context.horizonChanges.isEmpty {
                for (peer, sequence) in context.horizonChanges { storedHorizons[peer] = sequence }
                storedStemHorizon = storedHorizons.values.min()
            }
            return (value, context.lastSequence != before)
        } catch {
            throw reported(StoreError.wrap(error))
        }
    }

    /// The database id as its 16 raw bytes (the form replication uses).
    package var databaseIDBytes: [UInt8] {
        withUnsafeBytes(of: databaseID.uuid) { Array($0) }
    }

    /// Every peer horizon, sorted by peer.
    package var peerHorizons: [PeerHorizon] {
        lock.lock()
        defer { lock.unlock() }
        return storedHorizons.sorted { $0.key < $1.key }.map { PeerHorizon(peer: $0.key, sequence: $0.value) }
    }

    /// The largest sequence assigned so far (0 for an empty store).
    public var lastSequence: Int64 {
        storedLastSequence.load(ordering: .acquiring)
    }

    /// How many ancestors each leaf keeps (persisted in the file).
    public var revsLimit: Int {
        storedRevsLimit.load(ordering: .acquiring)
    }

    /// Changes and persists `revsLimit`; trees are stemmed to it as they are next written.
    public func setRevsLimit(_ limit: Int) throws(StoreError) {
        precondition((StoreLimits.revsLimitMin...StoreLimits.revsLimitMax).contains(limit), "revsLimit out of range")
        try write { context in context.revsLimit = limit }
    }

    /// Number of documents, deleted ones included (they are tombstones that replicate). O(1):
    /// kept in the write transactions (`DigestBuckets`).
    public var documentCount: Int {
        get throws(StoreError) { Int(digestBuckets.documentCount) }
    }

    /// Number of documents whose current revision is a deletion (CouchDB's `doc_del_count`). O(1).
    public var deletedCount: Int {
        get throws(StoreError) { Int(digestBuckets.deletedCount) }
    }

    /// The digest of what the database holds: for every document, its id and its open leaves
    /// (`DatabaseDigest`, `Protocol/digests.md`). Two databases holding the same documents with
    /// the same open leaves have the same digest. O(1): kept in the write transactions.
    public var digest: DatabaseDigest { digestBuckets.digest }

    /// The digest buckets as committed.
    var digestBuckets: DigestBuckets { storedBuckets.withLock { $0 } }

    /// The store's counts, as `documentCount`, `deletedCount`, `conflictedCount` and
    /// `awaitingContentCount()` give them, read together from one snapshot on the store's second
    /// connection (`readSnapshot`): never behind the store's lock, which a large document's read
    /// holds for as long as it takes, so an operator's `status` is answered meanwhile.
    /// Documents and deleted ones come from the digest buckets (O(1)); the conflicted documents
    /// and the revisions set aside are counted through indexes of their own (O(those)).
    public func counts() throws(StoreError) -> StoreCounts {
        let buckets = digestBuckets
        return try readSnapshot { db in
            StoreCounts(
                documents: Int(buckets.documentCount), deleted: Int(buckets.deletedCount), digest: buckets.digest,
                conflicted: Int(try db.scalarInt("SELECT count(*) FROM documents WHERE conflicted = 1") ?? 0),
                awaitingContent: Int(try db.scalarInt("SELECT count(*) FROM awaiting_revisions") ?? 0))
        }
    }

    /// Number of documents flagged conflicted.
    public var conflictedCount: Int {
        get throws(StoreError) {
            try read { db in Int(try db.scalarInt("SELECT count(*) FROM documents WHERE conflicted = 1") ?? 0) }
        }
    }

    /// The value of `PRAGMA synchronous` on the store's connection (1 NORMAL, 2 FULL).
    public var synchronousMode: Int {
        get throws(StoreError) { try read { db in Int(try db.pragmaInt("synchronous")) } }
    }

    /// Runs `PRAGMA integrity_check` and returns its report ("ok" when the file is sound).
    public func integrityCheck() throws(StoreError) -> String {
        try read { db in try db.query("PRAGMA integrity_check") { $0.text(0) }.joined(separator: "\n") }
    }
}

/// State carried through one write transaction: the connection, the sequence counter and the
/// revs limit. Its changes are persisted by `DocumentStore.write` just before the commit.
final class WriteContext {
    let db: Database
    var lastSequence: Int64
    var revsLimit: Int
    /// The peer horizons as committed before this transaction (the store's cache of them).
    let peerHorizons: [String: Int64]
    /// The lowest of `peerHorizons` (nil when there is none): what stemming must not cut below.
    let stemHorizon: Int64?
    /// Peer horizons written in this transaction (nil: forgotten), cached once it commits.
    var horizonChanges: [String: Int64?] = [:]
    /// Whether `kept_imported_conflicts` holds a row, once this transaction has asked
    /// (`KeptImportedConflicts`); nil before.
    var keptImportedConflictsExist: Bool?
    /// The digest buckets as committed before this transaction (the store's copy).
    let startingBuckets: DigestBuckets
    /// The buckets with this transaction's document writes applied; nil until one is noted.
    var buckets: DigestBuckets?
    /// Which buckets those writes changed (by bucket), written just before the commit.
    var changedBuckets: [Bool] = []
    /// The documents this transaction wrote for the first time, for `digest_index`.
    var newDocumentIDs: [String] = []
    let logger: Logger

    init(db: Database, lastSequence: Int64, revsLimit: Int, peerHorizons: [String: Int64], stemHorizon: Int64?,
         buckets: DigestBuckets, logger: Logger) {
        self.db = db
        startingBuckets = buckets
        self.lastSequence = lastSequence
        self.revsLimit = revsLimit
        self.peerHorizons = peerHorizons
        self.stemHorizon = stemHorizon
        self.logger = logger
    }

    /// Assigns the next sequence number.
    func nextSequence() -> Int64 {
        lastSequence += 1
        return lastSequence
    }

    /// Gives back the sequence just assigned, when the write it was for did not happen.
    func returnSequence(_ sequence: Int64) {
        returnSequences(first: sequence, count: 1)
    }

    /// Gives back the last `count` sequences assigned, `first` being the oldest of them, when the
    /// writes they were for were undone.
    func returnSequences(first: Int64, count: Int) {
        precondition(count >= 1 && first + Int64(count) - 1 == lastSequence, "only the last sequences assigned can be returned")
        lastSequence = first - 1
    }
}

/// What `DocumentStore.counts()` read: documents (deleted ones included), those whose current
/// revision is a deletion, those flagged conflicted, and revisions set aside for their content.
public struct StoreCounts: Sendable, Equatable {
    /// Documents, deleted ones included (`documentCount`).
    public var documents: Int
    /// Documents whose current revision is a deletion (`deletedCount`).
    public var deleted: Int
    /// The digest of what the database holds (`digest`).
    public var digest: DatabaseDigest
    /// Documents flagged conflicted (`conflictedCount`).
    public var conflicted: Int
    /// Revisions set aside for their attachment content (`awaitingContentCount()`).
    public var awaitingContent: Int
}
