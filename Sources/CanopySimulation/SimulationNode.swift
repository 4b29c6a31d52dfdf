import CanopyCore
import CanopyCrypto
import CanopyReplication
import CanopyStore
import Foundation
import Logging

/// A resolver that throws for about a third of the conflicts it sees until it is fixed, then
/// merges with `BuiltInResolver.mergeJSON`. Whether it throws is a pure function of the seed, the
/// document and the conflicting leaves, so every node and every replay decides alike.
public final class FlakyResolver: ConflictResolver, @unchecked Sendable {
    private let seed: UInt64
    /// Once true, the resolver never throws (the heal "fixes the application").
    public var fixed = false
    /// While true (and not fixed), the resolver throws for every conflict (tests plant with it).
    public var refusesAll = false

    /// The error it throws.
    public struct Refusal: Error, CustomStringConvertible {
        public let documentID: String
        public var description: String { "the simulated resolver refused \(documentID)" }
    }

    /// A resolver seeded with `seed`.
    public init(seed: UInt64) {
        self.seed = seed
    }

    public func resolve(_ conflict: Conflict) throws -> ResolutionDecision {
        if !fixed && (refusesAll || Self.refuses(seed: seed, conflict)) { throw Refusal(documentID: conflict.documentID) }
        return try BuiltInResolver.mergeJSON.resolve(conflict)
    }

    /// Whether the resolver refuses this conflict: a third of conflicts, by a hash of the seed,
    /// the document id and the sorted leaves.
    static func refuses(seed: UInt64, _ conflict: Conflict) -> Bool {
        var input = Array("flaky".utf8)
        withUnsafeBytes(of: seed.littleEndian) { input.append(contentsOf: $0) }
        input.append(contentsOf: conflict.documentID.utf8)
        for leaf in conflict.leaves.map(\.revision).sorted() { input.append(contentsOf: "\(leaf)".utf8) }
        return Blake2b.hash(input, outputBytes: 16)[0] % 3 == 0
    }
}

/// One simulated node, run as `canopyd` runs one: a store file per database it holds, one
/// `PeerLink` per neighbour carrying every database the two share over one connection of protocol
/// version 2 (`Protocol/replication-v2.md`), and a continuous `PeerReplicator` per (neighbour,
/// database) that `sharing` shares, configured from the share (`Sharing.replication`); a database
/// a neighbour attaches that the node does not share with it is refused and kept as a pending
/// offer (`PendingOffers`, which outlives a crash as the agent's file does).
///
/// Both ends of an edge dial (and redial after a failure), and each node keeps the connection the
/// simultaneous-connect rule picks (`SimultaneousConnect.Adoption`, applied as `EngineReplication`
/// applies it); sessions check and write received revisions on a `SimulatedWorker` (unless the
/// configuration asks for the inline one).
///
/// A crash is a kill: the node's scheduled work and connections vanish (its peers see resets),
/// its files are left as they are on disk — without a clean close, so without the checkpoint a
/// close would run — and a restart opens them again, so exactly the committed transactions
/// survive, through SQLite's WAL recovery. The files a crash leaves are copied to the node's next
/// file names (`n<index>[-<database>].<generation>.sqlite`): the dead process's store objects may
/// outlive the crash in memory for a while, and must never touch the files the restarted node
/// opens.
public final class SimulationNode: @unchecked Sendable {
    /// What a node is built from.
    struct Setup {
        var index: Int
        var peers: [Int]
        var databases: [DatabaseName]
        var sharing: Sharing
        var directory: URL
        var storeConfigurations: [DatabaseName: DocumentStore.Configuration]
        var replication: ReplicationConfiguration
        var servesBeyondSubscriptions: Bool
        var makeWorker: (() -> any ReplicationWorker)?
    }

    /// The node's index in the simulation (its name is `n<index>`).
    public let index: Int
    /// The name used in traces and reports, and the name its peers know it by.
    public var name: String { Self.name(index) }
    /// The database file of `default` the node opens; a new name after every crash.
    public var path: String { path(.default) }
    /// Neighbours, sorted.
    public let peers: [Int]
    /// The databases the node holds, sorted (`default` always).
    public let databases: [DatabaseName]
    /// What the node lets each neighbour do (peers named `n0`, `n1`, …).
    public let sharing: Sharing
    let scheduler: NodeScheduler
    private let network: SimulatedNetwork
    private let random: SeededRandom
    private let directory: URL
    private let storeConfigurations: [DatabaseName: DocumentStore.Configuration]
    private let replication: ReplicationConfiguration
    private let servesBeyondSubscriptions: Bool
    private let logger: Logger
    /// Makes the worker of a new replicator (nil: the inline worker).
    private let makeWorker: (() -> any ReplicationWorker)?
    private let races: RaceCounters
    private let trace: SimulationTrace
    /// The node's storage faults, one per database store (each store's fault injector).
    let storage: [DatabaseName: StorageFaults]
    /// Crashes so far; the files of generation g > 0 are `<base>.<g>.sqlite`.
    private var generation = 0
    /// Called for every document event with the peer and database it came through.
    var onEvent: @Sendable (Int, DatabaseName, DocumentEvent) -> Void = { _, _, _ in }
    /// Called when the node refuses a neighbour's channel for a database it does not share with it.
    var onRefusal: @Sendable (Int, DatabaseName, PendingOffers.Recorded) -> Void = { _, _, _ in }
    /// Replaces the configuration of a replicator before it starts (tests plant with it).
    var replicationOverride: ((_ peer: Int, _ database: DatabaseName, ReplicationConfiguration) -> ReplicationConfiguration)?
    /// The open stores by database; empty while crashed.
    public private(set) var stores: [DatabaseName: DocumentStore] = [:]
    /// The open store of `default`; nil while crashed.
    public var store: DocumentStore? { stores[.default] }
    /// The link to each neighbour; empty while crashed.
    private(set) var links: [Int: PeerLink] = [:]
    /// `replicators[peer][database]`; empty while crashed.
    private(set) var replicators: [Int: [DatabaseName: PeerReplicator]] = [:]
    /// The connection each peer's link runs on (`SimultaneousConnect.Adoption`, as the agent keeps it).
    private var adoption = SimultaneousConnect.Adoption()
    /// Databases neighbours attached that the node does not share with them (kept across crashes).
    private(set) var pendingOffers = PendingOffers(capacity: 64)
    /// The node side of its resolver client, for this process lifetime (`rules` runs only).
    var resolverHub: SimulatedResolverHub?
    /// Looks up another node (for accepting connections).
    var lookup: @Sendable (Int) -> SimulationNode? = { _ in nil }

    init(_ setup: Setup, network: SimulatedNetwork, random: SeededRandom, races: RaceCounters, trace: SimulationTrace, logger: Logger) throws {
        index = setup.index
        peers = setup.peers
        databases = setup.databases
        sharing = setup.sharing
        directory = setup.directory
        storeConfigurations = setup.storeConfigurations
        replication = setup.replication
        servesBeyondSubscriptions = setup.servesBeyondSubscriptions
        makeWorker = setup.makeWorker
        self.network = network
        scheduler = network.schedulers[setup.index]
        self.random = random
        self.races = races
        self.trace = trace
        self.logger = logger
        let base = network.base
        storage = Dictionary(uniqueKeysWithValues: setup.databases.map { ($0, StorageFaults(clock: { base.now })) })
        for (database, faults) in storage { faults.path = { [weak self] in self?.path(database) ?? "" } }
        try openStores()
    }

    /// A node's name as a peer: `n<index>`.
    static func name(_ index: Int) -> String { "n\(index)" }

    /// The file of `database` in the node's current generation.
    public func path(_ database: DatabaseName) -> String {
        let stem = "n\(index)" + (database == .default ? "" : "-\(database.text)")
        return directory.appendingPathComponent(stem + (generation == 0 ? "" : ".\(generation)") + ".sqlite").path
    }

    /// Opens the node's current files (SQLite recovers a crashed node's WAL), each store's
    /// commits passing through its storage faults while this process lifetime lasts. The
    /// attachment directory of a database is the node's for all its lifetimes, as an agent's
    /// `DIR/attachments` is: a crash gives the database file a new path, not the content.
    private func openStores() throws {
        let lifetime = generation
        // The process lives while it opens its stores: an open may write (the retry pass).
        opening = true
        defer { opening = false }
        for database in databases {
            var configuration = storeConfigurations[database]!
            configuration.faultInjector = StorageFaults.Lifetime(storage[database]!) { [weak self] in
                guard let self else { return false }
                return self.generation == lifetime && (!self.stores.isEmpty || self.opening)
            }
            let suffix = database == .default ? "" : "-\(database.text)"
            configuration.attachmentsDirectory = directory.appendingPathComponent("n\(index)\(suffix)-attachments").path
            stores[database] = try DocumentStore(path: path(database), configuration: configuration)
        }
    }

    /// True while `openStores` runs: the stores are not all open yet, but the process is alive.
    private var opening = false

    /// True when the node is up and not paused (it can take writes).
    public var isRunning: Bool { !stores.isEmpty && !scheduler.isPaused }

    /// Makes a link to every neighbour and a replicator for every database shared with it, and
    /// starts the replicators; each link dials at once.
    func startReplication() {
        guard !stores.isEmpty else { return }
        for peer in peers { makeLink(peer) }
        for peer in peers {
            for database in shared(with: peer) { replicators[peer]?[database]?.start() }
        }
    }

    /// The databases the node shares with `peer`, sorted.
    func shared(with peer: Int) -> [DatabaseName] {
        sharing.shares(with: Self.name(peer), among: databases).map(\.database).sorted()
    }

    private func makeLink(_ peer: Int) {
        let node = index
        let trace = self.trace
        let link = PeerLink(
            peerName: Self.name(peer), connectionID: Array(network.nodeIDs[node].publicKey.prefix(16)),
            dialer: SimulatedConnectionDialer(network: network, from: node, to: peer, lookup: lookup), scheduler: scheduler, logger: logger,
            refusal: { [weak self] database in
                if let self { self.onRefusal(peer, database, self.pendingOffers.record(ShareKey(database, Self.name(peer)), at: self.network.base.now)) }
                return Sharing.refusal(of: database)
            },
            onConnection: { up, reason in
                trace.record("n\(node) link n\(peer) \(up ? "up" : "down \(reason.map { "\($0)" } ?? "")")")
            })
        links[peer] = link
        for database in shared(with: peer) {
            let share = sharing.share(of: database, with: Self.name(peer))!
            guard var configuration = Sharing.replication(of: share, scope: Sharing.scope(of: share), replication) else { continue }
            if servesBeyondSubscriptions { configuration.servesBeyondSubscriptions = true }
            if let replicationOverride { configuration = replicationOverride(peer, database, configuration) }
            let replicator = PeerReplicator(
                peerName: Self.name(peer), store: stores[database]!, dialer: link.channelDialer(for: database), scheduler: scheduler,
                random: random, configuration: configuration, backoff: Backoff(initialSeconds: 0.5, maximumSeconds: 20, jitter: 0.5),
                logger: logger, worker: makeWorker?() ?? InlineReplicationWorker(), onDocumentEvents: { [weak self] events in
                    for event in events { self?.onEvent(peer, database, event) }
                })
            link.add(replicator, for: database)
            replicators[peer, default: [:]][database] = replicator
        }
    }

    // MARK: Simultaneous connect (as the agent's EngineReplication)

    /// A connection `peer` dialled reached this node: its link takes the listening end, unless
    /// the connection it runs on wins under the rule; then the new one is closed.
    fileprivate func acceptInbound(_ end: SimulatedConnectionEnd, from peer: Int) {
        guard let link = links[peer], admit(end, from: peer, link) else { return end.close(.localClosed) }
        link.adopt(end, role: .responder)
    }

    /// An outbound connection to `peer` completed: true to hand it to the link, false when the
    /// connection open wins (this one is closed), as the agent's `adoptOutbound`.
    fileprivate func adoptOutbound(_ end: SimulatedConnectionEnd, to peer: Int) -> Bool {
        guard let link = links[peer] else { return true }
        guard admit(end, from: peer, link) else {
            end.close(.localClosed)
            return false
        }
        return true
    }

    /// The simultaneous-connect rule for a new connection with `peer`.
    private func admit(_ end: SimulatedConnectionEnd, from peer: Int, _ link: PeerLink) -> Bool {
        guard adoption.admit(end.link.connection, from: Self.name(peer), sessionOpen: link.isConnected) else {
            races.simultaneousConnects += 1
            trace.record("n\(index) keeps its connection with n\(peer)")
            return false
        }
        return true
    }

    /// The connection the link with `peer` last took.
    func connection(to peer: Int) -> SimultaneousConnect.Connection? { adoption.connection(of: Self.name(peer)) }

    // MARK: Crash and restart

    /// Kills the node: pending work and connections vanish, and its files stay as they are on
    /// disk, under the names the restart opens; `torn`: it dies inside a commit of that
    /// database, whose files are as `torn`'s image has them.
    func crash(torn: (database: DatabaseName, image: CrashImage)? = nil) throws {
        let images = try databases.map { database in
            (database, try torn.flatMap { $0.database == database ? $0.image : nil } ?? CrashImage.capture(path: path(database)))
        }
        scheduler.crash()
        resolverHub?.alive = false
        resolverHub = nil
        links = [:]
        replicators = [:]
        adoption = SimultaneousConnect.Adoption()
        stores = [:]
        for faults in storage.values { faults.tearNextCommit = nil }
        network.takeDown(index)
        generation += 1
        for (database, image) in images { try image.write(to: path(database)) }
    }

    /// Opens the store files again (SQLite recovers their WAL) and restarts replication.
    func restart() throws {
        try openStores()
        scheduler.revive()
        network.bringUp(index)
        startReplication()
    }

    /// True when every replicator whose peer shares its database (`peerShares`) has an open,
    /// idle session (caught up both ways) and no store has a revision set aside for its content
    /// (work still to do, not rest). A replicator the peer refuses keeps retrying, and is not
    /// waited for.
    func isQuiescent(peerShares: (Int, DatabaseName) -> Bool) -> Bool {
        guard !stores.isEmpty, !scheduler.isPaused else { return false }
        for store in stores.values where (try? store.awaitingContentCount()) != 0 { return false }
        for (peer, byDatabase) in replicators {
            for (database, replicator) in byDatabase where peerShares(peer, database) {
                guard let session = replicator.currentSession, !session.isClosed, !session.isBusy else { return false }
            }
        }
        return true
    }
}

/// Dials a neighbour through the simulated network with connections of protocol version 2, as
/// the agent's `TCPPeerDialer` dials TCP: the listening end goes to the neighbour's link (through
/// its simultaneous-connect check), the dialling end through ours before our link sees it.
final class SimulatedConnectionDialer: ConnectionDialer, @unchecked Sendable {
    private let network: SimulatedNetwork
    private let from: Int
    private let to: Int
    private let lookup: @Sendable (Int) -> SimulationNode?

    init(network: SimulatedNetwork, from: Int, to: Int, lookup: @escaping @Sendable (Int) -> SimulationNode?) {
        self.network = network
        self.from = from
        self.to = to
        self.lookup = lookup
    }

    func dial(_ completion: @escaping @Sendable (Result<any ConnectionTransport, ReplicationError>) -> Void) {
        let (from, to, lookup) = (self.from, self.to, self.lookup)
        network.dial(from: from, to: to, accept: { end in
            if let node = lookup(to) { node.acceptInbound(end, from: from) } else { end.close(.localClosed) }
        }, completion: { result in
            guard case .success(let end) = result else { return completion(result.map { $0 }) }
            guard lookup(from)?.adoptOutbound(end, to: to) ?? false else {
                return completion(.failure(.disconnected("simultaneous connect: the connection already open is kept")))
            }
            completion(.success(end))
        })
    }
}
