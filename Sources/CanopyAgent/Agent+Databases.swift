import CanopyAdmin
import CanopyCore
import CanopyReplication
import CanopyStore
import CanopyWire
import Dispatch
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The agent's open databases, by name: read from any queue (replication looks a store up when it
/// starts replicating a database with a peer), changed on `storeQueue` by `db.create` and
/// `db.delete`.
final class DatabaseRegistry: Sendable {
    private let stores: Mutex<[DatabaseName: DocumentStore]>

    init(_ stores: [DatabaseName: DocumentStore]) {
        self.stores = Mutex(stores)
    }

    subscript(name: DatabaseName) -> DocumentStore? {
        get { stores.withLock { $0[name] } }
        set { stores.withLock { $0[name] = newValue } }
    }

    /// Removes and returns the store of `name`.
    func removeValue(forKey name: DatabaseName) -> DocumentStore? {
        stores.withLock { $0.removeValue(forKey: name) }
    }

    /// Every open database, by name.
    var sorted: [(key: DatabaseName, value: DocumentStore)] {
        stores.withLock { $0.sorted { $0.key < $1.key } }
    }
}

/// A database a document command works on: its name and its store.
struct OpenDatabase {
    let name: DatabaseName
    let store: DocumentStore
}

/// The agent's databases: `default` (`canopy.sqlite`, the one every command uses unless told
/// otherwise) and those `db.create` made (`databases/NAME.sqlite`, each with a
/// `[database NAME]` section in the config file). The config file says which exist; the stores
/// live in `databases`, on `storeQueue`.
///
/// Creating writes the file before the config section, and deleting removes the section before
/// the file, so a crash in between leaves at worst an unlisted file, which a later create of
/// the same name replaces; a section whose file is missing stops the agent at start-up, naming
/// the file, rather than serving an empty database in its place.
extension Agent {
    /// Opens a database's store with its settings, making the file first when `creating`, and,
    /// `checking`, checks it whole: a damaged file is not served (`init` explains why the full
    /// check; `AgentOptions.checksDatabasesOnOpen`).
    static func openStore(
        _ database: DatabaseConfig, in directory: DataDirectory, creating: Bool = false, resolvingKeptConflicts: Bool,
        attachmentSizeLimit: Int64, checking: Bool
    ) throws(AgentError) -> DocumentStore {
        let path = directory.databasePath(database.name)
        if database.name != .default {
            if creating {
                try directory.createDatabasesDirectory()
            } else if Glibc.access(path, F_OK) != 0 {
                throw .store("database \(database.name): its file \(path) is missing; restore it from a backup, or remove the [database \(database.name)] section from the config file to drop the database")
            }
        }
        try directory.restrictDatabaseFiles(database.name)
        let store: DocumentStore
        do {
            let configuration = DocumentStore.Configuration(
                revsLimit: database.revsLimit, conflictPolicy: .rules(database.resolutionRules),
                logger: Logger(label: "canopy.store"), checkpointInBackground: true, retriesConflictsOnOpen: resolvingKeptConflicts,
                attachmentsDirectory: directory.attachmentsPath, attachmentSizeLimit: attachmentSizeLimit)
            store = try DocumentStore(path: path, configuration: configuration)
        } catch {
            throw .store(error.description)
        }
        guard checking else { return store }
        let problems: [String]
        do { problems = try store.checkIntegrity(full: true) } catch { throw .store(error.description) }
        if !problems.isEmpty {
            throw .damagedDatabase(path: path, report: problems.joined(separator: "; "))
        }
        return store
    }

    /// The store of an open database, for an application running the agent in-process.
    package func store(of name: DatabaseName) -> DocumentStore? { databases[name] }

    /// The database `text` names (nil: `default`). On `storeQueue`.
    func database(named text: String?) throws(AdminFailure) -> OpenDatabase {
        dispatchPrecondition(condition: .onQueue(storeQueue))
        let name = try Self.databaseName(text ?? DatabaseName.default.text)
        guard let store = databases[name] else {
            throw AdminFailure(.notFound, "no database \(name) on this node; `canopyctl db list` shows them, `canopyctl db create \(name)` makes it")
        }
        return OpenDatabase(name: name, store: store)
    }

    /// `text` as a database name, or `invalid_argument` naming the rule it breaks.
    static func databaseName(_ text: String) throws(AdminFailure) -> DatabaseName {
        guard let name = DatabaseName(validating: text) else {
            throw AdminFailure(.invalidArgument, DatabaseName.refusal(of: text))
        }
        return name
    }

    /// `db.create {name, revs_limit?, conflicts?}`: makes the file, opens it, then adds its
    /// section to the config file. On `queue`; the store is opened on `storeQueue`.
    func createDatabase(_ command: Admin.CreateDatabase, _ reply: @escaping TypedAdminRoute<Admin.CreateDatabase>.Reply) throws(AdminFailure) {
        dispatchPrecondition(condition: .onQueue(queue))
        let name = try Self.databaseName(command.name)
        guard config.database(name) == nil else { throw AdminFailure(.conflict, "database \(name) already exists") }
        guard config.databases.count + 1 < AgentLimits.databasesMax else {
            throw AdminFailure(.failed, "already \(AgentLimits.databasesMax) databases")
        }
        var database = DatabaseConfig(name: name, revsLimit: config.revsLimit)
        if let limit = command.revsLimit { database.revsLimit = Int(limit) }
        if let text = command.conflicts {
            guard let strategy = ResolutionStrategy(parsing: text) else {
                throw AdminFailure(.invalidArgument, "conflicts must be automatic, local-wins, remote-wins, merge-json, manual or resolver NAME, not \"\(text.prefix(80))\"")
            }
            database.conflicts = strategy
        }
        let directory = options.directory
        let settings = database
        let attachmentSizeLimit = config.attachmentSizeLimit
        storeQueue.async { [self] in
            let database = settings
            do throws(AgentError) {
                // A file left by a create or delete that a crash cut short is not a database yet.
                for path in directory.databaseFilePaths(name) { unlink(path) }
                let store = try Self.openStore(
                    database, in: directory, creating: true, resolvingKeptConflicts: true, attachmentSizeLimit: attachmentSizeLimit,
                    checking: false)  // a new, empty file
                store.setDamageHandler { [weak self] damage in self?.storeFoundDamage(damage, in: name) }
                databases[name] = store
            } catch {
                return reply(.failure(AdminFailure(.failed, "cannot create database \(name): \(error)")))
            }
            queue.async { [self] in
                let text = ConfigEditor.addingDatabase(database, to: configFile.text, parsed: configFile.parsed)
                // Running before the file is applied: the new section is then no change that
                // waits for a restart.
                config.databases.append(database)
                do throws(AdminFailure) {
                    try commitConfigEdit(text, Admin.ConfigChanged(command: Admin.CreateDatabase.name, db: name.text))
                } catch {
                    config.databases.removeAll { $0.name == name }
                    storeQueue.async { [self] in databases[name] = nil }
                    return reply(.failure(error))
                }
                events.emit(Admin.DatabaseCreated(db: name.text))
                reply(.success(Admin.CreateDatabase.Reply(db: name.text, revsLimit: Int64(database.revsLimit), conflicts: database.conflicts.description)))
            }
        }
    }

    /// `db.delete {name}`: removes the section from the config file, closes the store and
    /// deletes its files. `default` cannot be deleted. On `queue`.
    func deleteDatabase(_ command: Admin.DeleteDatabase, _ reply: @escaping TypedAdminRoute<Admin.DeleteDatabase>.Reply) throws(AdminFailure) {
        dispatchPrecondition(condition: .onQueue(queue))
        let name = try Self.databaseName(command.name)
        guard name != .default else {
            throw AdminFailure(.invalidArgument, "the default database cannot be deleted (every command and peer uses it unless told otherwise)")
        }
        guard config.database(name) != nil else { throw AdminFailure(.notFound, "no database \(name) on this node") }
        let rules = configFile.parsed.config.databases.first { $0.name == name }?.rules.map(\.name) ?? []
        guard rules.isEmpty else {
            throw AdminFailure(.failed, "rules \(rules.joined(separator: ", ")) name database \(name); remove them from the config file first")
        }
        let text = ConfigEditor.removingDatabase(name, from: configFile.text, parsed: configFile.parsed)
        let running = config.databases
        config.databases.removeAll { $0.name == name }
        do {
            try commitConfigEdit(text, Admin.ConfigChanged(command: Admin.DeleteDatabase.name, db: name.text))
        } catch {
            config.databases = running
            throw error
        }
        let directory = options.directory
        storeQueue.async { [self] in
            // The store closes when released; its files go now (an open handle keeps reading an
            // unlinked file until then).
            let documents = databases.removeValue(forKey: name).flatMap { try? $0.documentCount } ?? 0
            for path in directory.databaseFilePaths(name) { unlink(path) }
            queue.async { [self] in
                resolvers.forget(database: name)
                events.emit(Admin.DatabaseDeleted(db: name.text, documents: Int64(documents)))
                reply(.success(Admin.DeleteDatabase.Reply(db: name.text, deleted: true)))
            }
        }
    }

    /// `db.list`: every database with its counts and the peers it is shared with. Peers share
    /// `default` in the direction their section gives unless a share section says otherwise.
    /// On `queue`; counts read on `storeQueue`.
    func listDatabases(_ reply: @escaping TypedAdminRoute<Admin.ListDatabases>.Reply) {
        dispatchPrecondition(condition: .onQueue(queue))
        let databases = config.allDatabases
        let rights = config.sharing
        let sharing = Dictionary(uniqueKeysWithValues: databases.map { database in
            (database.name, config.peers.compactMap { rights.share(of: database.name, with: $0.nodeID) }.map(Self.shareRow))
        })
        let waiting = Dictionary(uniqueKeysWithValues: databases.map { ($0.name, resolvers.waitingDocuments(in: $0.name)) })
        storeQueue.async { [self] in
            reply(storeResult {
                Admin.ListDatabases.Reply(databases: try databases.compactMap { database in
                    guard let store = self.databases[database.name] else { return nil }
                    return Admin.DatabaseRow(
                        db: database.name.text, counts: try storeCounts(of: store),
                        conflictsAwaitingResolver: try Self.conflictsAwaitingResolver(in: store, waiting: waiting[database.name] ?? []),
                        revsLimit: Int64(database.revsLimit), conflicts: database.conflicts.description,
                        rules: database.rules.map(Self.ruleRow), sharedWith: sharing[database.name] ?? [])
                })
            })
        }
    }

    /// A share as `db.list` and `share` show it: `{node_id, access, prefix?}`.
    static func shareRow(_ share: Share) -> Admin.Share {
        Admin.Share(nodeID: share.nodeID, access: share.access.rawValue, prefix: share.prefix)
    }

    /// `share {db, node_id, access, prefix?}`: lets a configured peer read and/or write this
    /// node's copy of a database, or the documents of it whose id starts with `prefix`; replaces
    /// an earlier share of the same database with the same peer. On `queue`.
    func share(_ command: Admin.ShareDatabase) throws(AdminFailure) -> Admin.ShareDatabase.Reply {
        dispatchPrecondition(condition: .onQueue(queue))
        let (name, nodeID) = try shareTarget(db: command.db, nodeID: command.nodeID)
        let access: ShareAccess = switch command.access {
        case .read: .read
        case .write: .write
        case .readWrite: .readWrite
        }
        if let prefix = command.prefix, prefix.isEmpty || prefix.utf8.count > WireLimits.docIDBytesMax || prefix.contains("#") || prefix.contains("\n") {
            throw AdminFailure(.invalidArgument, "\"prefix\" must be 1–\(WireLimits.docIDBytesMax) bytes without '#' or a line break")
        }
        let share = Share(database: name, nodeID: nodeID, access: access, prefix: command.prefix)
        pendingShares.remove(ShareKey(name, nodeID))
        try commitConfigEdit(
            ConfigEditor.settingShare(share, in: configFile.text, parsed: configFile.parsed),
            Admin.ConfigChanged(command: Admin.ShareDatabase.name, nodeID: nodeID, db: name.text))
        return Admin.ShareDatabase.Reply(db: name.text, sharedWith: Self.shareRow(share))
    }

    /// `unshare {db, node_id}`: the peer may no longer read or write the database. For `default`,
    /// which every configured peer otherwise shares, a share section with `access = none` says so.
    func unshare(_ command: Admin.UnshareDatabase) throws(AdminFailure) -> Admin.DatabasePeerReply {
        dispatchPrecondition(condition: .onQueue(queue))
        let (name, nodeID) = try shareTarget(db: command.db, nodeID: command.nodeID)
        guard config.share(of: name, with: nodeID) != nil else {
            throw AdminFailure(.notFound, "database \(name) is not shared with \(nodeID)")
        }
        let text = name == .default
            ? ConfigEditor.settingShare(Share(database: name, nodeID: nodeID, access: .none), in: configFile.text, parsed: configFile.parsed)
            : ConfigEditor.removingShares(from: configFile.text, parsed: configFile.parsed) { $0 == ShareKey(name, nodeID) }
        try commitConfigEdit(text, Admin.ConfigChanged(command: Admin.UnshareDatabase.name, nodeID: nodeID, db: name.text))
        return Admin.DatabasePeerReply(db: name.text, nodeID: nodeID)
    }

    /// `db.pending`: the databases peers asked to replicate that are not shared with them.
    func listPendingShares() -> Admin.ListPendingShares.Reply {
        dispatchPrecondition(condition: .onQueue(queue))
        return Admin.ListPendingShares.Reply(pending: pendingShares.all.map { key, offer in
            Admin.PendingShare(
                db: key.database.text, nodeID: key.nodeID, exists: config.database(key.database) != nil, attempts: Int64(offer.attempts),
                firstSeen: offer.firstSeen.rounded(), lastSeen: offer.lastSeen.rounded())
        })
    }

    /// `db.dismiss {db, node_id}`: dismisses a pending offer. It is no longer listed, and the
    /// peer's further requests for the database raise no `share.pending`, across restarts, until
    /// `share` accepts it or the peer is removed. A dismissed offer is no pending offer to dismiss.
    func dismissPendingShare(_ command: Admin.DismissPendingShare) throws(AdminFailure) -> Admin.DatabasePeerReply {
        dispatchPrecondition(condition: .onQueue(queue))
        let name = try Self.databaseName(command.db)
        let rawID = command.nodeID
        guard let nodeID = AgentIdentity.normalizeNodeID(rawID), pendingShares.dismiss(ShareKey(name, nodeID)) else {
            throw AdminFailure(.notFound, "no pending offer of database \(name) from \(rawID.prefix(80))")
        }
        return Admin.DatabasePeerReply(db: name.text, nodeID: nodeID)
    }

    /// The database (which must exist) and configured peer a `share` or `unshare` names.
    private func shareTarget(db: String, nodeID rawID: String) throws(AdminFailure) -> (DatabaseName, String) {
        let name = try Self.databaseName(db)
        guard config.database(name) != nil else {
            throw AdminFailure(.notFound, "no database \(name) on this node; `canopyctl db create \(name)` makes it")
        }
        guard let nodeID = AgentIdentity.normalizeNodeID(rawID) else {
            throw AdminFailure(.invalidArgument, "\"node_id\" is not a valid node id: \"\(rawID.prefix(80))\"")
        }
        guard config.peer(nodeID) != nil else {
            throw AdminFailure(.notFound, "\(nodeID) is not a configured peer; allow it first (`canopyctl peer add`)")
        }
        return (name, nodeID)
    }
}
