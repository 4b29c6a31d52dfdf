import CanopyCore

/// How the nodes of a run are connected.
public enum SimulationTopology: String, Sendable, CaseIterable {
    case pair, line, ring, mesh, random

    /// The edges (i < j, sorted) for `count` nodes. `random` draws a connected graph: a random
    /// spanning tree plus extra edges up to an average degree of about `averageDegree`.
    public func edges(count: Int, averageDegree: Double = 3, random: inout SplitMix64) -> [Edge] {
        precondition(count >= 2, "a topology needs two nodes")
        var edges: [Edge] = []
        switch self {
        case .pair: edges = [Edge(0, 1)]
        case .line: edges = (0..<(count - 1)).map { Edge($0, $0 + 1) }
        case .ring: edges = (0..<count).map { Edge($0, ($0 + 1) % count) }
        case .mesh:
            for i in 0..<count { for j in (i + 1)..<count { edges.append(Edge(i, j)) } }
        case .random:
            var seen = Set<Edge>()
            for node in 1..<count {
                let edge = Edge(node, random.index(below: node))
                if seen.insert(edge).inserted { edges.append(edge) }
            }
            let target = Int((Double(count) * averageDegree / 2).rounded())
            let possible = count * (count - 1) / 2
            while edges.count < min(target, possible) {
                let edge = Edge(random.index(below: count), random.index(below: count))
                if edge.a != edge.b, seen.insert(edge).inserted { edges.append(edge) }
            }
        }
        return Array(Set(edges)).sorted()
    }
}

/// An undirected edge between node indices, normalised so that `a < b`.
public struct Edge: Hashable, Comparable, Sendable {
    /// The lower node index.
    public let a: Int
    /// The higher node index.
    public let b: Int

    /// The edge between `x` and `y` (in either order).
    public init(_ x: Int, _ y: Int) {
        a = min(x, y)
        b = max(x, y)
    }

    public static func < (lhs: Edge, rhs: Edge) -> Bool { (lhs.a, lhs.b) < (rhs.a, rhs.b) }
}

/// The conflict policy every node of a run uses.
public enum SimulationPolicy: String, Sendable, CaseIterable {
    /// Deletes win, then most revisions.
    case automatic
    /// `BuiltInResolver.mergeJSON`, deterministic.
    case merge
    /// A resolver that throws for some conflicts (seeded, a pure function of document and leaves)
    /// until the heal, then merges.
    case throwing
    /// Conflicts kept; the node calls `resolveConflicts` periodically and at the heal.
    case manual
    /// Per-node rules by id prefix and body field (`SimulationRules`), one naming the resolver
    /// `sim`, answered by a seeded resolver client beside each node through the agent's resolver
    /// logic (`SimulatedResolverHub`).
    case rules
}

/// How much goes wrong during the fault phase.
public enum FaultLevel: String, Sendable, CaseIterable {
    case none, low, high

    /// In-connection fault rates.
    var rates: NetworkFaultRates {
        switch self {
        case .none: return .none
        case .low: return NetworkFaultRates(streamCorruption: 0.002, resetDuringRevisions: 0.02)
        case .high: return NetworkFaultRates(streamCorruption: 0.01, resetDuringRevisions: 0.08)
        }
    }

    /// Mean seconds between injected partitions, clogs, crashes, pauses and resets (nil: none).
    var meanSecondsBetweenFaults: Double? {
        switch self {
        case .none: return nil
        case .low: return 8
        case .high: return 3
        }
    }
}

/// Everything that defines a run; with the seed it determines the run completely.
public struct SimulationConfiguration: Sendable {
    /// The seed every random stream of the run derives from.
    public var seed: UInt64
    /// Number of nodes (2 for `pair`).
    public var nodes: Int
    /// How the nodes are connected.
    public var topology: SimulationTopology
    /// How much goes wrong in the fault phase.
    public var faults: FaultLevel
    /// The conflict policy of every node.
    public var policy: SimulationPolicy
    /// Size of the pool of document ids the workload uses.
    public var documents: Int
    /// Seconds of virtual time with faults and writes.
    public var faultPhaseSeconds: Double
    /// Mean seconds between workload operations.
    public var meanSecondsBetweenWrites: Double
    /// The stores' revsLimit.
    public var revsLimit: Int
    /// One-way link delay and jitter.
    public var latencySeconds: Double
    public var jitterSeconds: Double
    /// The document whose message-by-message history to keep.
    public var traceDocument: String?
    /// Average degree of `random` topologies.
    public var averageDegree: Double = 3
    /// Virtual seconds the healed phase may take to reach quiescence.
    public var healDeadlineSeconds: Double = 900
    /// Where sessions check and write received revisions: the production worker's semantics
    /// (`SimulatedWorker`, the default) or the inline worker.
    public var worker: SimulationWorker = .concurrent
    /// Whether a fault level other than `none` also injects storage faults (`StorageFaults`:
    /// failed commits, a full disk, a crash inside a commit).
    public var storageFaults = true

    /// Databases per node: 1 (one database, `default`, shared read-write between all
    /// neighbours) or more (databases `default`, `db1`, … held and shared with mixed rights as
    /// the seed draws them, `ShareTable`). Either way one connection per pair carries them.
    public var databases = 1
    /// Nodes of a multi-database run that lie when they serve a peer (0: none, the default): they
    /// ignore the filter the peer subscribed with, so the peer refuses what arrives outside it
    /// (`Simulation.liars`).
    public var liars = 0
    /// The workload also attaches content (1 byte to 600 KiB, so up to three parts) to documents,
    /// and the settled nodes must hold every attachment their documents' leaves name.
    public var attachments = false

    /// `changes` entries per batch (small batches exercise the in-flight window).
    public var batchSize: Int
    /// `changes` batches in flight.
    public var window: Int

    /// A configuration; unspecified choices are derived from the seed (so a seed list covers
    /// every topology, policy and fault level). Every choice is drawn whether or not it is given,
    /// so giving one option does not change the others.
    public init(seed: UInt64, nodes: Int? = nil, topology: SimulationTopology? = nil, faults: FaultLevel? = nil,
                policy: SimulationPolicy? = nil, documents: Int = 12, faultPhaseSeconds: Double = 40,
                meanSecondsBetweenWrites: Double = 0.5, revsLimit: Int? = nil, batchSize: Int? = nil, window: Int? = nil,
                latencySeconds: Double = 0.005, jitterSeconds: Double = 0.003, traceDocument: String? = nil) {
        var random = SplitMix64(seed: seed ^ 0xC0FF_EE00_5EED)
        let drawnTopology = SimulationTopology.allCases[random.index(below: SimulationTopology.allCases.count)]
        let drawnNodes = 3 + random.index(below: 3)
        let drawnFaults = [FaultLevel.none, .low, .low, .high, .high][random.index(below: 5)]
        let drawnPolicy = SimulationPolicy.allCases[random.index(below: SimulationPolicy.allCases.count)]
        // A quarter of the runs stem hard, so long chains outrun the limit.
        let drawnRevsLimit = random.chance(1, in: 4) ? 12 : 1000
        let drawnBatchSize = [3, 10, 50][random.index(below: 3)]
        let drawnWindow = [1, 2, 8][random.index(below: 3)]
        self.seed = seed
        self.topology = topology ?? drawnTopology
        self.nodes = self.topology == .pair ? 2 : (nodes ?? drawnNodes)
        self.faults = faults ?? drawnFaults
        self.policy = policy ?? drawnPolicy
        self.documents = documents
        self.faultPhaseSeconds = faultPhaseSeconds
        self.meanSecondsBetweenWrites = meanSecondsBetweenWrites
        self.revsLimit = revsLimit ?? drawnRevsLimit
        self.batchSize = batchSize ?? drawnBatchSize
        self.window = window ?? drawnWindow
        self.latencySeconds = latencySeconds
        self.jitterSeconds = jitterSeconds
        self.traceDocument = traceDocument
    }

    /// The options that reproduce this run with `canopy-sim`.
    public var commandLine: String {
        var parts = ["swift run -c release canopy-sim --seed \(seed) --nodes \(nodes) --topology \(topology.rawValue)",
                     "--faults \(faults.rawValue) --policy \(policy.rawValue) --docs \(documents) --revs-limit \(revsLimit)",
                     "--batch-size \(batchSize) --window \(window) --seconds \(faultPhaseSeconds)"]
        if databases > 1 { parts.append("--databases \(databases)") }
        if liars > 0 { parts.append("--liars \(liars)") }
        if attachments { parts.append("--attachments") }
        if worker == .inline { parts.append("--inline-worker") }
        if !storageFaults { parts.append("--no-storage-faults") }
        if let traceDocument { parts.append("--trace \(traceDocument)") }
        return parts.joined(separator: " ")
    }
}
