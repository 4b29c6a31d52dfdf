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
    public let documentID: String
    public let revision: RevisionID
    public let isDeletion: Bool
    public let time: Double
}

/// One deterministic run of the real replication engine and real stores over a simulated
/// network (`Protocol/design.md` §7):
///
///     setup      nodes with fresh SQLite files, a continuous PeerReplicator per edge
///     fault      `faultPhaseSeconds` of seeded writes and faults (network and node)
///     heal       every node up and running, links clean, resolvers fixed
///     settle     run to quiescence; manual nodes resolve their conflicts; repeat until stable
///     check      the invariants of `Protocol/design.md` §7.2 (`InvariantChecker`)
///
/// The nodes run production's concurrency: sessions check and write on a `SimulatedWorker`
/// (work overlapping the protocol, completions in a seeded order), both ends of every edge dial,
/// and the simultaneous-connect rule picks the connection they keep.
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
    public private(set) var writes: [AcknowledgedWrite] = []
    let directory: URL
    let replication: ReplicationConfiguration
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
    /// The races the run went through (worker overlap and reordering, simultaneous connects).
    let races = RaceCounters()
    /// Each node's rules under the `rules` policy (empty otherwise).
    let nodeRules: [ResolutionRules]
    /// Each node's resolver client under the `rules` policy (empty otherwise).
    private(set) var resolverClients: [SimulatedResolverClient] = []
    /// What the resolvers did.
    let resolverCounters = ResolverCounters()

    /// Sets up the nodes (files in a fresh temporary directory) without starting anything.
    public init(_ configuration: SimulationConfiguration, logger: Logger = Simulation.quietLogger) throws {
        self.configuration = configuration
        let seed = configuration.seed
        let scheduler = self.scheduler
        trace = SimulationTrace(document: configuration.traceDocument) { scheduler.now }
        var topologyRandom = SplitMix64(seed: seed ^ 0x7070_0001)
        edges = configuration.topology.edges(count: configuration.nodes, averageDegree: configuration.averageDegree, random: &topologyRandom)
        // Node ids (public keys: the simultaneous-connect rule compares them) and database ids.
        var identityRandom = SplitMix64(seed: seed ^ 0x1D1D_0006)
        var nodeIDs: [NodeID] = []
        var databaseIDs: [UUID] = []
        for _ in 0..<configuration.nodes {
            var key: [UInt8] = []
            for _ in 0..<4 { withUnsafeBytes(of: identityRandom.next().bigEndian) { key.append(contentsOf: $0) } }
            nodeIDs.append(NodeID(publicKey: key)!)
            var bytes: [UInt8] = []
            for _ in 0..<2 { withUnsafeBytes(of: identityRandom.next().bigEndian) { bytes.append(contentsOf: $0) } }
            databaseIDs.append(bytes.withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) })
        }
        network = SimulatedNetwork(
            nodeIDs: nodeIDs, base: scheduler, random: SeededRandom(seed: seed ^ 0x4E37_0002), trace: trace,
            latencySeconds: configuration.latencySeconds, jitterSeconds: configuration.jitterSeconds,
            rates: configuration.faults.rates)
        workloadRandom = SplitMix64(seed: seed ^ 0x3070_0003)
        faultRandom = SplitMix64(seed: seed ^ 0xFA17_0004)
        replication = ReplicationConfiguration(direction: .both, continuous: true, batchSize: configuration.batchSize, window: configuration.window)
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
        let engineRandom = SeededRandom(seed: seed ^ 0xE461_0005)
        let workerRandom = SeededRandom(seed: seed ^ 0x3012_0007)
        for index in 0..<configuration.nodes {
            let peers = edges.compactMap { $0.a == index ? $0.b : ($0.b == index ? $0.a : nil) }.sorted()
            let nodeScheduler = network.schedulers[index]
            let races = self.races
            let makeWorker: (() -> any ReplicationWorker)? = configuration.worker == .inline ? nil : {
                SimulatedWorker(scheduler: nodeScheduler, random: workerRandom, races: races)
            }
            // Under rules, each node's own, and the conflicts kept are offered by the node's
            // resolver hub's scan (the agent's start), not retried by the store's open.
            // The attachment directory is the node's for all its process lifetimes, as an agent's
            // `DIR/attachments` is: a crash gives the database file a new path, not the content.
            var storeConfiguration = DocumentStore.Configuration(
                revsLimit: configuration.revsLimit, conflictPolicy: nodeRules.isEmpty ? policy : .rules(nodeRules[index]),
                logger: logger, databaseID: databaseIDs[index], retriesConflictsOnOpen: nodeRules.isEmpty)
            storeConfiguration.attachmentsDirectory = directory.appendingPathComponent("n\(index)-attachments").path
            let node = try SimulationNode(
                index: index, path: directory.appendingPathComponent("n\(index).sqlite").path, peers: peers,
                network: network, random: engineRandom, configuration: storeConfiguration,
                storage: StorageFaults(clock: { scheduler.now }), races: races, makeWorker: makeWorker, logger: logger)
            nodes.append(node)
            trace.record("n\(index) node \(Hex.encode(nodeIDs[index].publicKey).prefix(16)) database \(node.store!.databaseID)")
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
            let index = node.index  // not `node`: the closure is stored on the node
            node.onEvent = { [weak self] peer, event in self?.documentEvent(node: index, peer: peer, event) }
            node.storage.died = { [weak self] image, seconds in self?.diedInsideCommit(node: index, image: image, downSeconds: seconds) }
        }
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

    private func documentEvent(node: Int, peer: Int, _ event: DocumentEvent) {
        trace.record("n\(node) \(event.kind.rawValue) \(event.documentID) \(event.revision.map { "\($0)" } ?? "-") via n\(peer)",
                     documents: [event.documentID])
        if event.kind == .resolutionFailed { resolutionFailures.append((node, event.documentID)) }
        nodes[node].resolverHub?.observe([event], peer: "n\(peer)")
        observer?(node, peer, event)
    }

    /// Starts every node's replicators.
    public func start() {
        for node in nodes { node.startReplication(configuration: replication) }
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
        violations += try checker.checkAfterSettling()
        violations += crashCheckViolations
        return SimulationReport(
            configuration: configuration, violations: violations, convergeSeconds: (settled ? quiescentAt : scheduler.now) - healedAt,
            messages: network.messagesSent, bytes: network.bytesSent, revisionsTransferred: network.revisionsSent,
            writes: writes.count, faults: network.faults, races: races.counts,
            resolvers: hasResolvers ? resolverCounters.counts : [:], traceHash: trace.hashHex, documentLines: trace.documentLines)
    }

    /// Ends every fault: crashed nodes restart, paused nodes resume, partitions and clogs end,
    /// links stop corrupting, disks stop failing, the flaky resolver is fixed, resolver clients
    /// reconnect for good.
    func heal() throws {
        trace.record("heal")
        network.rates = .none
        network.healAll()
        if healFixesResolver { resolver?.fixed = true }
        for node in nodes { node.storage.disarm() }
        for path in damagedContent.keys.sorted() { repairContent(path) }
        for node in nodes {
            if node.store == nil { try restart(node.index) }
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

    /// Every node idle, and every resolver client registered with nothing under way.
    private var isQuiescent: Bool { nodes.allSatisfy(\.isQuiescent) && resolversQuiet }

    /// When the last successful `runUntilQuiescent` first saw every node idle.
    public private(set) var quiescentAt: Double = 0

    /// Every node's revision tree of `documentID`, one node per line (for `--trace`).
    public func describeTrees(of documentID: String) throws -> String {
        var lines: [String] = ["trees of \(documentID) after settling:"]
        for node in nodes {
            guard let tree = try node.store?.revisionTree(id: documentID) else {
                lines.append("  n\(node.index): none")
                continue
            }
            let described = tree.sortedNodes.map { "\($0.id)<-\($0.parent.map { "\($0.generation)-\($0.digestHex.prefix(6))" } ?? "nil")/\($0.kind)" }
            lines.append("  n\(node.index): current \(tree.current.map { "\($0.id)" } ?? "-"): " + described.joined(separator: " "))
        }
        return lines.joined(separator: "\n")
    }

    /// Records an acknowledged write.
    func acknowledge(node: Int, documentID: String, revision: RevisionID, deletion: Bool) {
        writes.append(AcknowledgedWrite(node: node, documentID: documentID, revision: revision, isDeletion: deletion, time: scheduler.now))
        trace.record("n\(node) wrote \(documentID) \(revision)\(deletion ? " deleted" : "")", documents: [documentID])
    }
}
