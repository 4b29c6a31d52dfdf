import CanopyCore
import CanopyCrypto
import CanopyReplication
import CanopyStore
import Foundation
import Logging

/// A revision a node's application wrote in one database of a multi-database run.
public struct DatabaseWrite: Sendable, Equatable {
    public let node: Int
    public let database: DatabaseName
    public let documentID: String
    public let revision: RevisionID
}

/// One deterministic run of several databases with mixed rights (`SimulationConfiguration.databases`
/// > 1): every node holds some of the databases (a store each) and one `PeerLink` per neighbour,
/// which carries every database the two share over one connection of protocol version 2
/// (`Protocol/replication-v2.md`) through the simulated network. Both ends of an edge dial, as
/// agents do, and each node keeps the connection the simultaneous-connect rule picks
/// (`SimultaneousConnect.Adoption`, the agent's). Each (neighbour, database) the node shares (`ShareTable`, drawn from the seed) gets a
/// continuous `PeerReplicator` configured from the share (`Sharing.replication`); a database the
/// node does not share with that neighbour is refused when the neighbour attaches it.
///
///     setup      stores, links and replicators; the share table is recorded in the trace
///     fault      `faultPhaseSeconds` of seeded writes (any database a node holds, ids `a-NNN`
///                and `b-NNN`) and faults: partitions, clogs, resets, pauses, crashes with a
///                restart from the files, and the links' in-connection faults
///     heal       partitions and clogs end, crashed nodes restart, paused nodes resume, links
///                stop misbehaving
///     settle     run until every replicator whose peer shares its database has an open, idle
///                session (twice, a second apart)
///     check      the access and convergence invariants (`SharingChecker`)
///
/// Lying nodes (`SimulationConfiguration.liars`, none by default): a liar serves every peer
/// beyond the subscription the peer made (`ReplicationConfiguration.servesBeyondSubscriptions`),
/// offering and sending documents outside the prefix the peer subscribed with; its own shares
/// still bound what it serves, and it pulls like any node. So the receivers' refusal path runs:
/// an honest peer refuses those documents as they arrive (`rejected` events, counted in the
/// report's `sharing`, and named in the batch's acknowledgement: `refusedByPeer` at the liar).
/// Every invariant is checked at every node, liars included: a liar's lies reach only others,
/// and what a liar stores it stores as an honest receiver.
///
/// Randomness comes from streams derived from the seed, consumed in scheduler order, so a seed
/// replays exactly (the trace hash).
///
/// Storage faults (unless `storageFaults` is off), per database store, from a stream of their own
/// so the network faults fall as without them: a failed commit (I/O error), a full disk for 1–10 s,
/// and a torn commit (the node dies inside a commit of one of its stores, that commit's last WAL
/// frame torn, every other store's files as they are, and restarts 1–15 s later).
public final class SharingSimulation: @unchecked Sendable {
    public let configuration: SimulationConfiguration
    public let scheduler = SimulatedScheduler()
    public let trace: SimulationTrace
    public let network: SimulatedNetwork
    public let edges: [Edge]
    public let shares: ShareTable
    /// The nodes that serve their peers beyond their subscriptions, sorted (`configuration.liars`
    /// of them, drawn from the seed, nodes a peer subscribes to with a narrower prefix first).
    public let liars: [Int]
    public private(set) var writes: [DatabaseWrite] = []
    /// Replaces the configuration of a node's replicator for a (peer, database) before it starts
    /// (tests plant a node that replicates beyond its shares with it).
    public var replicationOverride: ((_ node: Int, _ peer: Int, _ database: DatabaseName, ReplicationConfiguration) -> ReplicationConfiguration)?
    /// Hook run after the run settled and before the checks (tests plant violations with it).
    public var beforeChecks: ((SharingSimulation) throws -> Void)?
    /// Each node's stores, by database (none while the node is down).
    public private(set) var stores: [[DatabaseName: DocumentStore]] = []
    private var storeConfigurations: [[DatabaseName: DocumentStore.Configuration]] = []
    /// Crashes of each node so far: the files of generation g > 0 are `n<node>-<database>.<g>.sqlite`.
    private var generations: [Int]
    private var links: [[Int: PeerLink]] = []
    /// Each node's simultaneous-connect table, as the agent keeps one.
    private var adoptions: [SimultaneousConnect.Adoption] = []
    /// Each node's offers: databases a neighbour attached that the node does not share with it,
    /// kept as the agent keeps them (its file outlives a crash; so do these).
    private var pendingOffers: [PendingOffers] = []
    /// `replicators[node][peer][database]`.
    private var replicators: [[Int: [DatabaseName: PeerReplicator]]] = []
    private let directory: URL
    private let replication: ReplicationConfiguration
    private let logger: Logger
    private let engineRandom: SeededRandom
    private let workerRandom: SeededRandom
    private var workloadRandom: SplitMix64
    private var faultRandom: SplitMix64
    private var storageRandom: SplitMix64
    /// Each node's storage faults, by database (`StorageFaults`, one per store).
    private var storage: [[DatabaseName: StorageFaults]] = []
    /// True while `openStores` runs: the node's process is alive though its stores are not all open.
    private var opening = false
    private let nodeIDs: [NodeID]
    private var bodyNumber: Int64 = 0
    let races = RaceCounters()
    /// Access violations seen as they happened (invariant 8, from the replicators' events).
    var accessViolations: [Violation] = []
    /// What the run did that the access rules concern, by name.
    var counts: [String: Int] = [:]

    /// Sets up the nodes (files in a fresh temporary directory) without starting anything.
    public init(_ configuration: SimulationConfiguration, logger: Logger = Simulation.quietLogger) throws {
        var configuration = configuration
        if configuration.policy != .merge { configuration.policy = .automatic }
        self.configuration = configuration
        self.logger = logger
        let seed = configuration.seed
        let scheduler = self.scheduler
        trace = SimulationTrace(document: configuration.traceDocument) { scheduler.now }
        var topologyRandom = SplitMix64(seed: seed ^ 0x7070_0001)
        edges = configuration.topology.edges(count: configuration.nodes, averageDegree: configuration.averageDegree, random: &topologyRandom)
        shares = ShareTable(seed: seed, nodes: configuration.nodes, edges: edges, databases: configuration.databases)
        liars = Self.chooseLiars(configuration.liars, seed: seed, shares: shares, edges: edges)
        var identityRandom = SplitMix64(seed: seed ^ 0x1D1D_0006)
        func bytes(_ words: Int) -> [UInt8] {
            var bytes: [UInt8] = []
            for _ in 0..<words { withUnsafeBytes(of: identityRandom.next().bigEndian) { bytes.append(contentsOf: $0) } }
            return bytes
        }
        nodeIDs = (0..<configuration.nodes).map { _ in NodeID(publicKey: bytes(4))! }
        network = SimulatedNetwork(
            nodeIDs: nodeIDs, base: scheduler, random: SeededRandom(seed: seed ^ 0x4E37_0002), trace: trace,
            latencySeconds: configuration.latencySeconds, jitterSeconds: configuration.jitterSeconds, rates: configuration.faults.rates)
        workloadRandom = SplitMix64(seed: seed ^ 0x3070_0003)
        faultRandom = SplitMix64(seed: seed ^ 0xFA17_0004)
        storageRandom = SplitMix64(seed: seed ^ 0x5707_000C)
        engineRandom = SeededRandom(seed: seed ^ 0xE461_0005)
        workerRandom = SeededRandom(seed: seed ^ 0x3012_0007)
        replication = ReplicationConfiguration(continuous: true, batchSize: configuration.batchSize, window: configuration.window)
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("canopy-sim-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        // Conflicts settle on receipt: merge or automatic (the other policies run as automatic).
        let policy: ConflictPolicy = configuration.policy == .merge ? .custom(BuiltInResolver.mergeJSON) : .automatic
        for line in shares.lines { trace.record(line) }
        if !liars.isEmpty { trace.record("liars \(liars.map { "n\($0)" }.joined(separator: " "))") }
        generations = Array(repeating: 0, count: configuration.nodes)
        for node in 0..<configuration.nodes {
            var nodeConfigurations: [DatabaseName: DocumentStore.Configuration] = [:]
            for database in shares.holdings[node] {
                let id = bytes(2).withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
                nodeConfigurations[database] = DocumentStore.Configuration(
                    revsLimit: configuration.revsLimit, conflictPolicy: policy, logger: logger, databaseID: id)
                trace.record("n\(node) database \(database) \(id)")
            }
            storeConfigurations.append(nodeConfigurations)
            storage.append(Dictionary(uniqueKeysWithValues: shares.holdings[node].map { database in
                let faults = StorageFaults(clock: { scheduler.now })
                faults.path = { [unowned self] in path(node, database) }
                faults.died = { [unowned self] image, seconds in
                    network.count(fault: "tornCommit", "n\(node) \(database) \(Int(seconds))s")
                    crash(node, restartAfter: seconds, torn: (database, image))
                }
                return (database, faults)
            }))
            stores.append([:])
            try openStores(node)
        }
    }

    /// `count` nodes in an order drawn from the seed (a stream of its own, so the rest of the run
    /// draws as without liars), first those that serve some peer documents the peer's
    /// subscription leaves out: the peer pulls with a prefix the node's own share does not match.
    static func chooseLiars(_ count: Int, seed: UInt64, shares: ShareTable, edges: [Edge]) -> [Int] {
        guard count > 0 else { return [] }
        var random = SplitMix64(seed: seed ^ 0x11A2_000B)
        var order = Array(0..<shares.holdings.count)
        for index in order.indices.reversed() where index > 0 { order.swapAt(index, random.index(below: index + 1)) }
        let canLie = Set(edges.flatMap { [($0.a, $0.b), ($0.b, $0.a)] }.compactMap { node, peer in
            shares.holdings[node].contains { database in
                guard let serving = shares.share(node, for: peer, database), serving.access.peerReads,
                      let pulling = shares.share(peer, for: node, database), pulling.access.peerWrites, let narrower = pulling.prefix
                else { return false }
                return serving.prefix != narrower
            } ? node : nil
        })
        let ordered = order.filter(canLie.contains) + order.filter { !canLie.contains($0) }
        return ordered.prefix(count).sorted()
    }

    /// The file of `node`'s `database` in its current generation.
    func path(_ node: Int, _ database: DatabaseName) -> String {
        let generation = generations[node] == 0 ? "" : ".\(generations[node])"
        return directory.appendingPathComponent("n\(node)-\(database.text)\(generation).sqlite").path
    }

    /// Opens `node`'s files (SQLite recovers a crashed node's WAL).
    /// Each store's commits pass through its storage faults while this process lifetime lasts.
    private func openStores(_ node: Int) throws {
        let lifetime = generations[node]
        opening = true
        defer { opening = false }
        for database in shares.holdings[node] {
            var configuration = storeConfigurations[node][database]!
            configuration.faultInjector = StorageFaults.Lifetime(storage[node][database]!) { [weak self] in
                guard let self else { return false }
                return generations[node] == lifetime && (!stores[node].isEmpty || opening)
            }
            stores[node][database] = try DocumentStore(path: path(node, database), configuration: configuration)
        }
    }

    deinit {
        for scheduler in network.schedulers { scheduler.crash() }
        scheduler.removeAll()
        try? FileManager.default.removeItem(at: directory)
    }

    /// The neighbours of `node`, sorted.
    public func peers(of node: Int) -> [Int] {
        edges.compactMap { $0.a == node ? $0.b : ($0.b == node ? $0.a : nil) }.sorted()
    }

    // MARK: Setup

    /// Makes every node's links and replicators and starts them.
    public func start() {
        links = Array(repeating: [:], count: configuration.nodes)
        adoptions = Array(repeating: SimultaneousConnect.Adoption(), count: configuration.nodes)
        pendingOffers = Array(repeating: PendingOffers(capacity: 64), count: configuration.nodes)
        replicators = Array(repeating: [:], count: configuration.nodes)
        for node in 0..<configuration.nodes { startNode(node) }
    }

    /// Makes `node`'s links and replicators and starts the replicators.
    private func startNode(_ node: Int) {
        for peer in peers(of: node) { makeLink(node, peer) }
        for peer in peers(of: node) {
            for database in shares.shared(node, with: peer) { replicators[node][peer]?[database]?.start() }
        }
    }

    private func makeLink(_ node: Int, _ peer: Int) {
        let scheduler = network.schedulers[node]
        let dialer = SimulatedConnectionDialer(simulation: self, from: node, to: peer)
        let trace = self.trace
        let link = PeerLink(
            peerName: ShareTable.name(of: peer), connectionID: Array(nodeIDs[node].publicKey.prefix(16)), dialer: dialer, scheduler: scheduler,
            logger: logger,
            refusal: { [weak self] database in
                self?.refused(database, at: node, to: peer)
                return Sharing.refusal(of: database)
            },
            onConnection: { up, reason in
                trace.record("n\(node) link n\(peer) \(up ? "up" : "down \(reason.map { "\($0)" } ?? "")")")
            })
        links[node][peer] = link
        for database in shares.shared(node, with: peer) {
            let share = shares.share(node, for: peer, database)!
            var configuration = Sharing.replication(of: share, scope: Sharing.scope(of: share), replication)!
            if liars.contains(node) { configuration.servesBeyondSubscriptions = true }
            if let replicationOverride { configuration = replicationOverride(node, peer, database, configuration) }
            let races = self.races
            let replicator = PeerReplicator(
                peerName: ShareTable.name(of: peer), store: stores[node][database]!, dialer: link.channelDialer(for: database), scheduler: scheduler,
                random: engineRandom, configuration: configuration, backoff: Backoff(initialSeconds: 0.5, maximumSeconds: 20, jitter: 0.5),
                logger: logger,
                worker: self.configuration.worker == .concurrent
                    ? SimulatedWorker(scheduler: scheduler, random: workerRandom, races: races) : InlineReplicationWorker(),
                onDocumentEvents: { [weak self] events in
                    for event in events { self?.documentEvent(node: node, peer: peer, database: database, event) }
                })
            link.add(replicator, for: database)
            replicators[node][peer, default: [:]][database] = replicator
        }
    }

    /// `node` refused `peer`'s channel for `database`: counted, and kept as a pending offer.
    private func refused(_ database: DatabaseName, at node: Int, to peer: Int) {
        counts["refusedAttach", default: 0] += 1
        let recorded = pendingOffers[node].record(ShareKey(database, ShareTable.name(of: peer)), at: scheduler.now)
        trace.record("n\(node) refuses \(database) to n\(peer)\(recorded == .new ? ", a new offer" : "")")
    }

    /// A connection `from` dialled reached `to`: its link takes the listening end.
    fileprivate func accept(_ end: SimulatedConnectionEnd, at node: Int, from peer: Int) {
        guard let link = links[node][peer], admit(end, at: node, from: peer, link) else { return end.close(.localClosed) }
        link.adopt(end, role: .responder)
    }

    /// An outbound connection of `node` to `peer` completed: true to hand it to the link, false
    /// when the connection open wins (it is closed), as the agent's `adoptOutbound`.
    fileprivate func adoptOutbound(_ end: SimulatedConnectionEnd, at node: Int, to peer: Int) -> Bool {
        guard let link = links[node][peer] else { return true }
        guard admit(end, at: node, from: peer, link) else {
            end.close(.localClosed)
            return false
        }
        return true
    }

    /// The simultaneous-connect rule for a new connection between `node` and `peer`.
    private func admit(_ end: SimulatedConnectionEnd, at node: Int, from peer: Int, _ link: PeerLink) -> Bool {
        guard adoptions[node].admit(end.link.connection, from: ShareTable.name(of: peer), sessionOpen: link.isConnected) else {
            counts["simultaneousConnect", default: 0] += 1
            trace.record("n\(node) keeps its connection with n\(peer)")
            return false
        }
        return true
    }

    /// Invariant 8, as it happens: a revision a replicator stored (`pulled`) must come from a
    /// peer that may write it here and that may let this node read it.
    private func documentEvent(node: Int, peer: Int, database: DatabaseName, _ event: DocumentEvent) {
        trace.record("n\(node) \(database) \(event.kind.rawValue) \(event.documentID) \(event.revision.map { "\($0)" } ?? "-") via n\(peer)",
                     documents: [event.documentID])
        counts[event.kind.rawValue, default: 0] += 1
        guard event.kind == .pulled else { return }
        if !shares.flows(from: peer, to: node, database, event.documentID) {
            accessViolations.append(Violation(
                invariant: .writeAccess, documentID: event.documentID, nodes: [peer, node],
                detail: "\(database): n\(node) stored \(event.revision.map { "\($0)" } ?? "-") from n\(peer) at \(SimulationTrace.format(scheduler.now)), "
                    + "but n\(peer) grants \(shares.share(peer, for: node, database).map { "\($0)" } ?? "nothing") and n\(node) grants "
                    + "\(shares.share(node, for: peer, database).map { "\($0)" } ?? "nothing")"))
        }
    }

    // MARK: Running

    /// Runs the whole scenario and checks the invariants.
    public func run() throws -> SimulationReport {
        start()
        scheduleWorkload(until: configuration.faultPhaseSeconds)
        scheduleFaults(until: configuration.faultPhaseSeconds)
        scheduleStorageFaults(until: configuration.faultPhaseSeconds)
        scheduler.run(deadline: configuration.faultPhaseSeconds)
        let healedAt = scheduler.now
        heal()
        var violations: [Violation] = []
        let quiescentAt = runToQuiescence(scheduler, deadline: healedAt + configuration.healDeadlineSeconds) { self.isQuiescent }
        if quiescentAt == nil {
            violations.append(Violation(invariant: .convergence, documentID: nil, nodes: [],
                                        detail: "no quiescence within \(Int(configuration.healDeadlineSeconds)) s after the heal"))
        }
        try beforeChecks?(self)
        var checker = SharingChecker(simulation: self)
        violations += accessViolations
        violations += try checker.check()
        var sharing = counts
        sharing["withheld"] = checker.withheld
        sharing["databases"] = shares.databases.count
        sharing["pendingOffers"] = pendingOffers.reduce(0) { $0 + $1.listed.count }
        return SimulationReport(
            configuration: configuration, violations: violations, convergeSeconds: (quiescentAt ?? scheduler.now) - healedAt,
            messages: network.messagesSent, bytes: network.bytesSent, revisionsTransferred: network.revisionsSent,
            writes: writes.count, faults: network.faults, races: races.counts, resolvers: [:], sharing: sharing,
            traceHash: trace.hashHex, documentLines: trace.documentLines)
    }

    /// Every node up and resumed, partitions and clogs over, links clean.
    private func heal() {
        trace.record("heal")
        network.rates = .none
        network.healAll()
        for faults in storage.flatMap(\.values) { faults.disarm() }
        for node in 0..<configuration.nodes {
            restart(node)
            network.schedulers[node].resume()
        }
    }

    /// Every node running, and every replicator whose peer shares its database with an open,
    /// idle session (a replicator the peer refuses keeps retrying, and is not waited for).
    private var isQuiescent: Bool {
        for node in 0..<configuration.nodes {
            guard !stores[node].isEmpty, !network.schedulers[node].isPaused else { return false }
            for (peer, byDatabase) in replicators[node] {
                for (database, replicator) in byDatabase where shares.share(peer, for: node, database) != nil {
                    guard let session = replicator.currentSession, !session.isClosed, !session.isBusy else { return false }
                }
            }
        }
        return true
    }

    /// Every node's revision tree of `documentID` in every database it holds (for `--trace`).
    public func describeTrees(of documentID: String) throws -> String {
        var lines: [String] = ["trees of \(documentID) after settling:"]
        for database in shares.databases {
            for node in 0..<configuration.nodes {
                guard let store = stores[node][database] else { continue }
                guard let tree = try store.revisionTree(id: documentID) else {
                    lines.append("  n\(node) \(database): none")
                    continue
                }
                let described = tree.sortedNodes.map { "\($0.id)/\($0.kind)" }
                lines.append("  n\(node) \(database): current \(tree.current.map { "\($0.id)" } ?? "-"): " + described.joined(separator: " "))
            }
        }
        return lines.joined(separator: "\n")
    }

    // MARK: Workload

    /// `a-NNN` for even numbers, `b-NNN` for odd ones (so prefixed shares cover half the pool).
    public func documentID(_ number: Int) -> String {
        let digits = String(number)
        return ShareTable.prefixes[number % 2] + String(repeating: "0", count: max(0, 3 - digits.count)) + digits
    }

    private func scheduleWorkload(until end: Double) {
        var time = 0.05
        while true {
            time += exponential(mean: configuration.meanSecondsBetweenWrites, &workloadRandom)
            guard time < end else { break }
            scheduler.schedule(after: time - scheduler.now) { [weak self] in self?.performRandomWrite() }
        }
    }

    /// An update (or a creation) of a random document of a random database of a random node,
    /// a deletion one time in five, and one time in five the same update on every other
    /// running node holding the database at the same instant (concurrent edits).
    private func performRandomWrite() {
        let node = workloadRandom.index(below: configuration.nodes)
        let databases = shares.holdings[node]
        let database = databases[workloadRandom.index(below: databases.count)]
        let id = documentID(workloadRandom.index(below: configuration.documents))
        let kind = workloadRandom.index(below: 5)
        var writers = [node]
        if kind == 0 { writers = (0..<configuration.nodes).filter { shares.holds($0, database) } }
        for writer in writers where !network.schedulers[writer].isPaused {
            guard let store = stores[writer][database] else { continue }
            do {
                let current: Document?
                do { current = try store.get(id: id) } catch .notFound { current = nil }
                let revision: RevisionID
                if kind == 1, let current, !current.isDeleted {
                    revision = try store.delete(id: id, rev: current.revision)
                } else {
                    bodyNumber += 1
                    let body: JSONValue = .object(["by": .string("n\(writer)"), "n": .int(bodyNumber)])
                    revision = try store.put(id: id, body: body, replacing: current.flatMap { $0.isDeleted ? nil : $0.revision })
                }
                writes.append(DatabaseWrite(node: writer, database: database, documentID: id, revision: revision))
                trace.record("n\(writer) \(database) wrote \(id) \(revision)", documents: [id])
            } catch {
                trace.record("n\(writer) \(database) write failed: \(error)")
            }
        }
    }

    // MARK: Faults

    /// Network faults at exponentially spaced moments: partitions (both ways or one way) of
    /// 1–20 s, clogs of 1–8 s, resets, pauses of 1–40 s (past the dead-peer timeout sometimes),
    /// and crashes with a restart 1–15 s later.
    private func scheduleFaults(until end: Double) {
        guard let mean = configuration.faults.meanSecondsBetweenFaults else { return }
        var time = 0.0
        while true {
            time += exponential(mean: mean, &faultRandom)
            guard time < end else { break }
            let kind = faultRandom.index(below: 6)
            let edge = edges[faultRandom.index(below: edges.count)]
            let (from, to) = faultRandom.chance(1, in: 2) ? (edge.a, edge.b) : (edge.b, edge.a)
            let fraction = Double(1 + faultRandom.next(below: 1000)) / 1000
            scheduler.schedule(after: time - scheduler.now) { [weak self] in
                guard let self else { return }
                switch kind {
                case 0..<4: network.inject(SimulatedNetwork.LinkFault.allCases[kind], from: from, to: to, fraction: fraction)
                case 4: pause(from, seconds: 1 + 39 * fraction)
                default: crash(from, restartAfter: 1 + 14 * fraction)
                }
            }
        }
    }

    /// Storage faults at exponentially spaced moments (twice the network faults' mean), each on
    /// one store of a node that is up: its next commit fails with an I/O error, its commits fail
    /// with SQLITE_FULL for 1–10 s, or its next commit tears (the node dies inside it).
    private func scheduleStorageFaults(until end: Double) {
        guard configuration.storageFaults, let mean = configuration.faults.meanSecondsBetweenFaults else { return }
        var time = 0.0
        while true {
            time += exponential(mean: 2 * mean, &storageRandom)
            guard time < end else { break }
            let kind = storageRandom.index(below: 3)
            let node = storageRandom.index(below: configuration.nodes)
            let database = shares.holdings[node][storageRandom.index(below: shares.holdings[node].count)]
            let fraction = Double(1 + storageRandom.next(below: 1000)) / 1000
            let keep = Int(storageRandom.next(below: 1 << 20))
            scheduler.schedule(after: time - scheduler.now) { [weak self] in
                guard let self, !stores[node].isEmpty, let faults = storage[node][database] else { return }
                switch kind {
                case 0:
                    network.count(fault: "ioError", "n\(node) \(database)")
                    faults.failNextCommit = true
                case 1:
                    let seconds = 1 + 9 * fraction
                    network.count(fault: "diskFull", "n\(node) \(database) \(Int(seconds))s")
                    faults.fullUntil = max(faults.fullUntil ?? 0, scheduler.now + seconds)
                default:
                    // Counted when the commit tears (a store that commits nothing before the heal never does).
                    if faults.tearNextCommit == nil { faults.tearNextCommit = .init(keep: keep, downSeconds: 1 + 14 * fraction) }
                }
            }
        }
    }

    /// Kills `node` between two steps: its scheduled work and connections vanish (its peers see
    /// resets), its files stay as they are on disk, copied to the names the restart opens (the
    /// dead process's stores never touch those). `torn`: the node dies inside a commit of that
    /// database, whose files are as the death left them.
    private func crash(_ node: Int, restartAfter seconds: Double, torn: (DatabaseName, CrashImage)? = nil) {
        guard !stores[node].isEmpty else { return }
        if torn == nil { network.count(fault: "crash", "n\(node) \(Int(seconds))s") }
        for faults in storage[node].values { faults.tearNextCommit = nil }
        do {
            let images = try shares.holdings[node].map { database in
                (database, try torn.flatMap { $0.0 == database ? $0.1 : nil } ?? CrashImage.capture(path: path(node, database)))
            }
            network.schedulers[node].crash()
            links[node] = [:]
            adoptions[node] = SimultaneousConnect.Adoption()
            replicators[node] = [:]
            stores[node] = [:]
            network.takeDown(node)
            generations[node] += 1
            for (database, image) in images { try image.write(to: path(node, database)) }
        } catch {
            trace.record("crash n\(node) failed: \(error)")
        }
        scheduler.schedule(after: seconds) { [weak self] in self?.restart(node) }
    }

    /// Opens a crashed node's files again and starts its links and replicators.
    private func restart(_ node: Int) {
        guard stores[node].isEmpty else { return }
        do {
            try openStores(node)
        } catch {
            return trace.record("restart n\(node) failed: \(error)")
        }
        network.schedulers[node].revive()
        network.bringUp(node)
        trace.record("restart n\(node)")
        startNode(node)
    }

    private func pause(_ node: Int, seconds: Double) {
        let paused = network.schedulers[node]
        guard !paused.isPaused else { return }
        network.count(fault: "pause", "n\(node) \(Int(seconds))s")
        paused.pause()
        scheduler.schedule(after: seconds) { [weak self] in
            paused.resume()
            self?.trace.record("resume n\(node)")
        }
    }
}

/// Dials a neighbour's link through the simulated network with connections of protocol
/// version 2; the neighbour's link takes the listening end as the responder.
final class SimulatedConnectionDialer: ConnectionDialer, @unchecked Sendable {
    private weak var simulation: SharingSimulation?
    private let from: Int
    private let to: Int

    init(simulation: SharingSimulation, from: Int, to: Int) {
        self.simulation = simulation
        self.from = from
        self.to = to
    }

    func dial(_ completion: @escaping @Sendable (Result<any ConnectionTransport, ReplicationError>) -> Void) {
        guard let simulation else { return completion(.failure(.disconnected("simulation over"))) }
        let (from, to) = (self.from, self.to)
        simulation.network.dial(from: from, to: to, ends: { $0.makeConnectionEnds() }, accept: { [weak simulation] end in
            if let simulation { simulation.accept(end, at: to, from: from) } else { end.close(.localClosed) }
        }, completion: { [weak simulation] result in
            guard case .success(let end) = result else { return completion(result.map { $0 }) }
            guard simulation?.adoptOutbound(end, at: from, to: to) ?? false else {
                return completion(.failure(.disconnected("simultaneous connect: the connection already open is kept")))
            }
            completion(.success(end))
        })
    }
}

/// Steps `scheduler` until `isQuiescent` holds twice in a row with a second of virtual time
/// between (so trailing messages land): the time it first held, or nil when `deadline` came first.
func runToQuiescence(_ scheduler: SimulatedScheduler, deadline: Double, _ isQuiescent: () -> Bool) -> Double? {
    while scheduler.now < deadline {
        scheduler.run(until: isQuiescent, deadline: deadline)
        guard isQuiescent() else { return nil }
        let idleAt = scheduler.now
        scheduler.advance(by: 1)
        if isQuiescent() { return idleAt }
    }
    return nil
}
