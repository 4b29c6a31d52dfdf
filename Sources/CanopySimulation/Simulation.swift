import CanopyCore
import CanopyCrypto
import CanopyReplication
import CanopyStore
import Foundation
import Logging

/// A revision a node's `put`, `delete` or `putBatch` returned: the application was told it is
/// stored, so it must never be lost.
public struct AcknowledgedWrite: Sendable, Equatable {
    public let node: Int
    public let database: DatabaseName
    public let documentID: String
    public let revision: RevisionID
    public let isDeletion: Bool
    public let time: Double
}

/// One deterministic run of the real replication engine and real stores over a simulated
/// network (`Protocol/design.md` §7), each node run as `canopyd` runs one (`SimulationNode`):
/// protocol version 2's `PeerLink` and `ChannelMux` per neighbour, the agent's
/// simultaneous-connect adoption, and replication configured from the rights model (`Sharing`).
///
///     setup      nodes with fresh SQLite files (one per database held), a link per edge end,
///                a continuous PeerReplicator per (neighbour, shared database)
///     fault      `faultPhaseSeconds` of seeded writes and faults (network, node and storage)
///     heal       every node up and running, links clean, resolvers fixed
///     settle     run to quiescence; manual nodes resolve their conflicts; repeat until stable
///     check      the invariants of `Protocol/design.md` §7.2 (`InvariantChecker`; with several
///                databases, the access and convergence invariants of `SharingChecker`)
///
/// Options (`SimulationConfiguration`): the databases and their shares (one database shared
/// read-write between all neighbours, or several held and shared with mixed rights drawn from
/// the seed, `ShareTable`), lying nodes that serve beyond their peers' subscriptions, the
/// conflict policy with its resolvers (`rules`: resolver clients beside every node), attachments
/// in the workload, storage faults. Resolvers other than merge and attachments run with one
/// database (a run of several databases takes `merge` or else `automatic`, and no attachments).
///
/// The nodes run production's concurrency: sessions check and write on a `SimulatedWorker`
/// (work overlapping the protocol, completions in a seeded order), both ends of every edge dial,
/// and the simultaneous-connect rule picks the connection they keep.
///
/// Lying nodes (`SimulationConfiguration.liars`, none by default): a liar serves every peer
/// beyond the subscription the peer made (`ReplicationConfiguration.servesBeyondSubscriptions`),
/// offering and sending documents outside the prefix the peer subscribed with; its own shares
/// still bound what it serves, and it pulls like any node. So the receivers' refusal path runs:
/// an honest peer refuses those documents as they arrive (`rejected` events, counted in the
/// report's `sharing`, and named in the batch's acknowledgement: `refusedByPeer` at the liar).
///
/// Randomness comes from separate SplitMix64 streams derived from the seed (network, engine,
/// workload, faults, worker, identities), consumed in scheduler order; the stores' database ids
/// and the nodes' ids are drawn from the seed too, and the store cuts parallel work by batch size
/// alone, never by the machine's processor count. So the same configuration replays exactly, on
/// any machine, and produces the same trace hash (which covers the database ids).
public final class Simulation: @unchecked Sendable {
    public let configuration: SimulationConfiguration
    public let scheduler = SimulatedScheduler()
    public let trace: SimulationTrace
    public let network: SimulatedNetwork
    public private(set) var nodes: [SimulationNode] = []
    public let edges: [Edge]
    /// Which databases each node holds and what it shares with each neighbour.
    public let shares: ShareTable
    /// The nodes that serve their peers beyond their subscriptions, sorted (`configuration.liars`
    /// of them, drawn from the seed, nodes a peer subscribes to with a narrower prefix first).
    public let liars: [Int]
    public private(set) var writes: [AcknowledgedWrite] = []
    let directory: URL
    var workloadRandom: SplitMix64
    var faultRandom: SplitMix64
    let resolver: FlakyResolver?
    /// Document events that reported a failed resolution: (node, document).
    public internal(set) var resolutionFailures: [(node: Int, documentID: String)] = []
    /// Called for every document event (node, peer, event); the mesh experiment tracks hops.
    public var observer: (@Sendable (Int, Int, DocumentEvent) -> Void)?
    /// Whether the heal fixes the flaky resolver and reconnects the resolver clients for good
    /// (tests turn it off to plant a violation: the clients then close for good).
    public var healFixesResolver = true
    /// Replaces the configuration of a node's replicator for a (peer, database) before it starts
    /// (tests plant a node that replicates beyond its shares with it).
    public var replicationOverride: ((_ node: Int, _ peer: Int, _ database: DatabaseName, ReplicationConfiguration) -> ReplicationConfiguration)?

    /// Makes the throwing policy's resolver refuse every conflict (tests plant with it).
    public func breakResolver() {
        resolver?.refusesAll = true
    }
    /// Hook run after the run settled and before the checks (tests plant violations with it).
    public var beforeChecks: ((Simulation) throws -> Void)?
    var nextBodyNumber: Int64 = 0
    /// Per node, the content it last attached (the workload names it again sometimes).
    var attachedContent: [Int: AttachmentMetadata] = [:]
    /// Content files a `damagedContent` fault flipped a byte of, with their original bytes.
    var damagedContent: [String: [UInt8]] = [:]
    /// Invariant 4 violations found at crash moments and restarts during the fault phase.
    var crashCheckViolations: [Violation] = []
    /// Access violations seen as they happened (invariant 8, from the replicators' events).
    var accessViolations: [Violation] = []
    /// What the run did that the access rules concern, by name (document events by kind,
    /// refused attaches).
    var counts: [String: Int] = [:]
    /// The races the run went through (worker overlap and reordering, simultaneous connects).
    let races = RaceCounters()
    /// Each node's rules under the `rules` policy (empty otherwise).
    let nodeRules: [ResolutionRules]
    /// Each node's resolver client under the `rules` policy (empty otherwise).
    private(set) var resolverClients: [SimulatedResolverClient] = []
    /// What the resolvers did.
    let resolverCounters = ResolverCounters()

    /// Whether the run holds several databases with drawn shares.
    var isMultiDatabase: Bool { configuration.databases > 1 }

    /// Each node's stores, by database (none while the node is down).
    public var stores: [[DatabaseName: DocumentStore]] { nodes.map(\.stores) }

    /// The file of `node`'s `database` in its current generation.
    public func path(_ node: Int, _ database: DatabaseName) -> String { nodes[node].path(database) }

    /// Sets up the nodes (files in a fresh temporary directory) without starting anything.
    public init(_ configuration: SimulationConfiguration, logger: Logger = Simulation.quietLogger) throws {
        var configuration = configuration
        if configuration.databases > 1 {
            // Resolvers and attachments run with one database: conflicts settle on receipt.
            if configuration.policy != .merge { configuration.policy = .automatic }
            configuration.attachments = false
        }
        self.configuration = configuration
        let seed = configuration.seed
        let scheduler = self.scheduler
        trace = SimulationTrace(document: configuration.traceDocument) { scheduler.now }
        var topologyRandom = SplitMix64(seed: seed ^ 0x7070_0001)
        edges = configuration.topology.edges(count: configuration.nodes, averageDegree: configuration.averageDegree, random: &topologyRandom)
        shares = ShareTable(seed: seed, nodes: configuration.nodes, edges: edges, databases: configuration.databases)
        liars = Self.chooseLiars(configuration.liars, seed: seed, shares: shares, edges: edges)
        // Node ids (public keys: the simultaneous-connect rule compares them), then database ids.
        var identityRandom = SplitMix64(seed: seed ^ 0x1D1D_0006)
        func bytes(_ words: Int) -> [UInt8] {
            var bytes: [UInt8] = []
            for _ in 0..<words { withUnsafeBytes(of: identityRandom.next().bigEndian) { bytes.append(contentsOf: $0) } }
            return bytes
        }
        let nodeIDs = (0..<configuration.nodes).map { _ in NodeID(publicKey: bytes(4))! }
        network = SimulatedNetwork(
            nodeIDs: nodeIDs, base: scheduler, random: SeededRandom(seed: seed ^ 0x4E37_0002), trace: trace,
            latencySeconds: configuration.latencySeconds, jitterSeconds: configuration.jitterSeconds,
            rates: configuration.faults.rates)
        workloadRandom = SplitMix64(seed: seed ^ 0x3070_0003)
        faultRandom = SplitMix64(seed: seed ^ 0xFA17_0004)
        let replication = ReplicationConfiguration(continuous: true, batchSize: configuration.batchSize, window: configuration.window)
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("canopy-sim-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let policy: ConflictPolicy
        switch configuration.policy {
        case .automatic: policy = .automatic; resolver = nil
        case .merge: policy = .custom(BuiltInResolver.mergeJSON); resolver = nil
        case .throwing:
            let flaky = FlakyResolver(seed: seed)
            policy = .custom(flaky)
            resolver = flaky
        case .manual: policy = .manual; resolver = nil
        case .rules: policy = .manual; resolver = nil
        }
        nodeRules = configuration.policy == .rules ? SimulationRules.draw(seed: seed, nodes: configuration.nodes) : []
        if !nodeRules.isEmpty { trace.record("rules \(SimulationRules.describe(nodeRules))") }
        if isMultiDatabase { for line in shares.lines { trace.record(line) } }
        if !liars.isEmpty { trace.record("liars \(liars.map { "n\($0)" }.joined(separator: " "))") }
        let engineRandom = SeededRandom(seed: seed ^ 0xE461_0005)
        let workerRandom = SeededRandom(seed: seed ^ 0x3012_0007)
        for index in 0..<configuration.nodes {
            let nodeScheduler = network.schedulers[index]
            let races = self.races
            let makeWorker: (() -> any ReplicationWorker)? = configuration.worker == .inline ? nil : {
                SimulatedWorker(scheduler: nodeScheduler, random: workerRandom, races: races)
            }
            // Under rules, each node's own, and the conflicts kept are offered by the node's
            // resolver hub's scan (the agent's start), not retried by the store's open.
            var storeConfigurations: [DatabaseName: DocumentStore.Configuration] = [:]
            for database in shares.holdings[index] {
                let id = bytes(2).withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
                storeConfigurations[database] = DocumentStore.Configuration(
                    revsLimit: configuration.revsLimit, conflictPolicy: nodeRules.isEmpty ? policy : .rules(nodeRules[index]),
                    logger: logger, databaseID: id, retriesConflictsOnOpen: nodeRules.isEmpty)
            }
            let setup = SimulationNode.Setup(
                index: index, peers: peers(of: index), databases: shares.holdings[index], sharing: shares.sharing[index],
                directory: directory, storeConfigurations: storeConfigurations, replication: replication,
                servesBeyondSubscriptions: liars.contains(index), makeWorker: makeWorker)
            let node = try SimulationNode(setup, network: network, random: engineRandom, races: races, trace: trace, logger: logger)
            nodes.append(node)
            let held = node.databases.map { "\($0) \(node.stores[$0]!.databaseID)" }.joined(separator: ", ")
            trace.record("n\(index) node \(Hex.encode(nodeIDs[index].publicKey).prefix(16)) database \(held)")
        }
        if !nodeRules.isEmpty {
            for node in nodes {
                let client = SimulatedResolverClient(node: node, seed: seed, base: scheduler, trace: trace, counters: resolverCounters)
                resolverClients.append(client)
                trace.record("n\(node.index) resolver client \(client.style.rawValue)")
            }
        }
        for node in nodes {
            node.lookup = { [weak self] index in self?.nodes[index] }
            let index = node.index  // not `node`: the closures are stored on the node
            node.onEvent = { [weak self] peer, database, event in self?.documentEvent(node: index, peer: peer, database: database, event) }
            node.onRefusal = { [weak self] peer, database, recorded in self?.refused(database, at: index, to: peer, recorded) }
            node.replicationOverride = { [weak self] peer, database, configuration in
                self?.replicationOverride?(index, peer, database, configuration) ?? configuration
            }
            for (database, faults) in node.storage {
                faults.died = { [weak self] image, seconds in self?.diedInsideCommit(node: index, database: database, image: image, downSeconds: seconds) }
            }
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

    /// The neighbours of `node`, sorted.
    public func peers(of node: Int) -> [Int] {
        edges.compactMap { $0.a == node ? $0.b : ($0.b == node ? $0.a : nil) }.sorted()
    }

    deinit {
        // Pending and held work retains the nodes, their stores and the schedulers (timers and
        // deliveries refer to them): drop it so that every store closes.
        for node in nodes { node.scheduler.crash() }
        scheduler.removeAll()
        try? FileManager.default.removeItem(at: directory)
    }

    /// A logger that drops everything (the engine logs expected failures at warning level).
    public static let quietLogger: Logger = {
        var logger = Logger(label: "canopy.sim") { _ in SwiftLogNoOpLogHandler() }
        logger.logLevel = .critical
        return logger
    }()

    /// Records a document event; invariant 8 as it happens: a revision a replicator stored
    /// (`pulled`) must come from a peer that may write it here and that may let this node read it.
    private func documentEvent(node: Int, peer: Int, database: DatabaseName, _ event: DocumentEvent) {
        let named = isMultiDatabase ? " \(database)" : ""
        trace.record("n\(node)\(named) \(event.kind.rawValue) \(event.documentID) \(event.revision.map { "\($0)" } ?? "-") via n\(peer)",
                     documents: [event.documentID])
        counts[event.kind.rawValue, default: 0] += 1
        if event.kind == .resolutionFailed { resolutionFailures.append((node, event.documentID)) }
        if database == .default { nodes[node].resolverHub?.observe([event], peer: "n\(peer)") }
        observer?(node, peer, event)
        guard event.kind == .pulled, !shares.flows(from: peer, to: node, database, event.documentID) else { return }
        accessViolations.append(Violation(
            invariant: .writeAccess, documentID: event.documentID, nodes: [peer, node],
            detail: "\(database): n\(node) stored \(event.revision.map { "\($0)" } ?? "-") from n\(peer) at \(SimulationTrace.format(scheduler.now)), "
                + "but n\(peer) grants \(shares.share(peer, for: node, database).map { "\($0)" } ?? "nothing") and n\(node) grants "
                + "\(shares.share(node, for: peer, database).map { "\($0)" } ?? "nothing")"))
    }

    /// `node` refused `peer`'s channel for `database`: counted, and kept as a pending offer.
    private func refused(_ database: DatabaseName, at node: Int, to peer: Int, _ recorded: PendingOffers.Recorded) {
        counts["refusedAttach", default: 0] += 1
        trace.record("n\(node) refuses \(database) to n\(peer)\(recorded == .new ? ", a new offer" : "")")
    }

    /// Starts every node's replicators.
    public func start() {
        for node in nodes { node.startReplication() }
        for node in nodes { startResolverHub(node.index) }
        connectResolverClients()
    }

    /// Runs the whole scenario and checks the invariants.
    public func run() throws -> SimulationReport {
        start()
        scheduleWorkload(until: configuration.faultPhaseSeconds)
        scheduleFaults(until: configuration.faultPhaseSeconds)
        schedulePeriodicResolution(until: configuration.faultPhaseSeconds)
        scheduleResolverMisbehaviour(until: configuration.faultPhaseSeconds)
        scheduler.run(deadline: configuration.faultPhaseSeconds)
        let checker = InvariantChecker(simulation: self)
        var violations = try checker.checkBeforeHeal()
        let healedAt = scheduler.now
        try heal()
        let settled = try settle(deadline: healedAt + configuration.healDeadlineSeconds)
        if !settled {
            violations.append(Violation(invariant: .convergence, documentID: nil, nodes: [],
                                        detail: "no quiescence within \(Int(configuration.healDeadlineSeconds)) s after the heal"))
        }
        try beforeChecks?(self)
        var sharing: [String: Int] = [:]
        if isMultiDatabase {
            var sharingChecker = SharingChecker(simulation: self)
            violations += try sharingChecker.check()
            sharing = counts
            sharing["withheld"] = sharingChecker.withheld
            sharing["databases"] = shares.databases.count
            sharing["pendingOffers"] = nodes.reduce(0) { $0 + $1.pendingOffers.listed.count }
        } else {
            violations += try checker.checkAfterSettling()
        }
        violations += accessViolations
        violations += crashCheckViolations
        var report = SimulationReport(
            configuration: configuration, violations: violations, convergeSeconds: (settled ? quiescentAt : scheduler.now) - healedAt,
            messages: network.messagesSent, bytes: network.bytesSent, revisionsTransferred: network.revisionsSent,
            writes: writes.count, faults: network.faults, races: races.counts,
            resolvers: hasResolvers ? resolverCounters.counts : [:], traceHash: trace.hashHex, documentLines: trace.documentLines)
        report.sharing = sharing
        return report
    }

    /// Ends every fault: crashed nodes restart, paused nodes resume, partitions and clogs end,
    /// links stop corrupting, disks stop failing, the flaky resolver is fixed, resolver clients
    /// reconnect for good.
    func heal() throws {
        trace.record("heal")
        network.rates = .none
        network.healAll()
        if healFixesResolver { resolver?.fixed = true }
        for faults in nodes.flatMap({ $0.storage.values }) { faults.disarm() }
        for path in damagedContent.keys.sorted() { repairContent(path) }
        for node in nodes {
            if node.stores.isEmpty { try restart(node.index) }
            node.scheduler.resume()
        }
        for client in resolverClients {
            if healFixesResolver { client.heal() } else { client.stop() }
        }
    }

    /// Runs to quiescence, letting manual and resolver nodes settle their conflicts, until a
    /// round changes nothing. False if the deadline passed first.
    func settle(deadline: Double) throws -> Bool {
        for _ in 0..<8 {
            guard runUntilQuiescent(deadline: deadline) else { return false }
            var changed = false
            for node in nodes {
                guard let store = node.store else { continue }
                switch configuration.policy {
                case .manual:
                    for id in try store.conflictedDocumentIDs() {
                        _ = try store.resolveConflicts(id: id, resolver: BuiltInResolver.mergeJSON)
                        changed = true
                    }
                case .automatic, .merge, .rules:
                    // These must settle every conflict on receipt, or their resolvers must:
                    // nothing to retry (a leftover conflict is an invariant 5 violation, not
                    // something to paper over; rules leave only what they route to manual).
                    break
                case .throwing:
                    if !(try store.conflictedDocumentIDs().isEmpty) {
                        _ = try store.retryConflictResolution()
                        changed = true
                    }
                }
            }
            if !changed { return true }
        }
        return runUntilQuiescent(deadline: deadline)
    }

    /// Steps until every node's every session is open and idle, twice in a row with a second of
    /// virtual time between (so trailing messages land), or until `deadline`.
    func runUntilQuiescent(deadline: Double) -> Bool {
        guard let idleAt = runToQuiescence(scheduler, deadline: deadline, { self.isQuiescent }) else { return false }
        quiescentAt = idleAt
        return true
    }

    /// Every node idle (every replicator whose peer shares its database caught up), and every
    /// resolver client registered with nothing under way.
    private var isQuiescent: Bool {
        nodes.allSatisfy { node in node.isQuiescent { peer, database in shares.share(peer, for: node.index, database) != nil } } && resolversQuiet
    }

    /// When the last successful `runUntilQuiescent` first saw every node idle.
    public private(set) var quiescentAt: Double = 0

    /// Every node's revision tree of `documentID` in every database it holds, one line each
    /// (for `--trace`).
    public func describeTrees(of documentID: String) throws -> String {
        var lines: [String] = ["trees of \(documentID) after settling:"]
        for database in shares.databases {
            let named = isMultiDatabase ? " \(database)" : ""
            for node in nodes where node.databases.contains(database) {
                guard let tree = try node.stores[database]?.revisionTree(id: documentID) else {
                    lines.append("  n\(node.index)\(named): none")
                    continue
                }
                let described = tree.sortedNodes.map { "\($0.id)<-\($0.parent.map { "\($0.generation)-\($0.digestHex.prefix(6))" } ?? "nil")/\($0.kind)" }
                lines.append("  n\(node.index)\(named): current \(tree.current.map { "\($0.id)" } ?? "-"): " + described.joined(separator: " "))
            }
        }
        return lines.joined(separator: "\n")
    }

    /// Records an acknowledged write.
    func acknowledge(node: Int, database: DatabaseName = .default, documentID: String, revision: RevisionID, deletion: Bool) {
        writes.append(AcknowledgedWrite(node: node, database: database, documentID: documentID, revision: revision, isDeletion: deletion, time: scheduler.now))
        let named = isMultiDatabase ? " \(database)" : ""
        trace.record("n\(node)\(named) wrote \(documentID) \(revision)\(deletion ? " deleted" : "")", documents: [documentID])
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
