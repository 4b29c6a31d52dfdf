import CanopyCore
import CanopyReplication

/// The mesh propagation experiment (`Protocol/design.md` §8): a random mesh of `nodes` nodes with average
/// degree `degree` over links of `latencySeconds`, no faults. Changes are written one at a time at
/// random nodes, `spacingSeconds` apart; for each, the simulator follows the revision from node to
/// node: a node's hop count is its sender's plus one (the sender is the peer whose session first
/// delivered the revision). A change's figures are the largest hop count and the time until the
/// last node stored it.
public final class MeshExperiment: @unchecked Sendable {
    /// The result for one change.
    public struct Propagation: Sendable {
        public let hops: Int
        public let seconds: Double
        public let reachedAll: Bool
    }

    /// Summary over all changes.
    public struct Result: Sendable {
        public let propagations: [Propagation]
        public let edges: Int
        public let messages: Int
        public let bytes: Int

        /// The `fraction` quantile (nearest rank) of `values`.
        static func quantile(_ values: [Double], _ fraction: Double) -> Double {
            let sorted = values.sorted()
            guard !sorted.isEmpty else { return 0 }
            let rank = Int((fraction * Double(sorted.count)).rounded(.up)) - 1
            return sorted[min(max(rank, 0), sorted.count - 1)]
        }

        public var hopsP50: Double { Self.quantile(propagations.map { Double($0.hops) }, 0.5) }
        public var hopsP99: Double { Self.quantile(propagations.map { Double($0.hops) }, 0.99) }
        public var secondsP50: Double { Self.quantile(propagations.map(\.seconds), 0.5) }
        public var secondsP99: Double { Self.quantile(propagations.map(\.seconds), 0.99) }
        public var allReached: Bool { propagations.allSatisfy(\.reachedAll) }
    }

    private let simulation: Simulation
    private let changes: Int
    private let spacingSeconds: Double
    /// Per traced document: each node's hop count and arrival time.
    private var arrivals: [String: [Int: (hops: Int, time: Double)]] = [:]

    /// Sets up the mesh.
    public init(seed: UInt64, nodes: Int = 100, degree: Double = 4, latencySeconds: Double = 0.005,
                changes: Int = 1000, spacingSeconds: Double = 0.25) throws {
        var configuration = SimulationConfiguration(
            seed: seed, nodes: nodes, topology: .random, faults: FaultLevel.none, policy: .automatic,
            latencySeconds: latencySeconds, jitterSeconds: 0)
        configuration.averageDegree = degree
        // Propagation over the links is what is measured: the simulated worker's delays are a
        // model for shaking out orderings (with a slow tail on purpose), not measured costs.
        configuration.worker = .inline
        simulation = try Simulation(configuration)
        self.changes = changes
        self.spacingSeconds = spacingSeconds
        simulation.observer = { [weak self] node, peer, event in self?.observe(node: node, peer: peer, event) }
    }

    private func observe(node: Int, peer: Int, _ event: DocumentEvent) {
        guard event.kind == .pulled, var seen = arrivals[event.documentID], seen[node] == nil, let from = seen[peer] else { return }
        seen[node] = (from.hops + 1, simulation.scheduler.now)
        arrivals[event.documentID] = seen
    }

    /// Connects the mesh, writes the changes one by one and measures each.
    public func run() throws -> Result {
        simulation.start()
        guard simulation.runUntilQuiescent(deadline: 600) else { throw MeshError.didNotConnect }
        var random = SplitMix64(seed: simulation.configuration.seed ^ 0x3E54_0006)
        var propagations: [Propagation] = []
        let nodeCount = simulation.nodes.count
        for change in 0..<changes {
            let origin = simulation.nodes[random.index(below: nodeCount)]
            let id = "mesh-\(change)"
            guard let store = origin.store else { throw MeshError.didNotConnect }
            let start = simulation.scheduler.now
            arrivals[id] = [origin.index: (0, start)]
            _ = try store.put(id: id, body: .object(["change": .int(Int64(change))]), replacing: nil)
            simulation.scheduler.run(until: { self.arrivals[id]?.count == nodeCount }, deadline: start + 30)
            let seen = arrivals[id] ?? [:]
            propagations.append(Propagation(
                hops: seen.values.map(\.hops).max() ?? 0, seconds: (seen.values.map(\.time).max() ?? start) - start,
                reachedAll: seen.count == nodeCount))
            arrivals[id] = nil
            simulation.scheduler.advance(by: max(0, start + spacingSeconds - simulation.scheduler.now))
        }
        return Result(propagations: propagations, edges: simulation.edges.count,
                      messages: simulation.network.messagesSent, bytes: simulation.network.bytesSent)
    }

    /// Why the experiment could not run.
    public enum MeshError: Error {
        case didNotConnect
    }
}
