import ArgumentParser
import CanopySimulation
import Foundation

/// `canopy-bench mesh`: the simulator's propagation experiment (CanopySimulation's
/// `MeshExperiment`, the same as `canopy-sim mesh`): a random 100-node mesh over 5 ms simulated
/// links, changes written one at a time at random nodes, the hops and simulated time until the
/// last node stores each. The reference beside the hops is push gossip's log₂ n + ln n rounds
/// (Frieze–Grimmett/Pittel); it is theory, not a measurement, since a mesh has no ceiling to run.
struct MeshBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mesh", abstract: "Simulated 100-node mesh: hops and simulated time for a change to reach every node.")

    @Option(help: "Seed of the topology and the writers.") var seed: UInt64 = 1
    @Option(help: "Nodes.") var nodes = 100
    @Option(help: "Average degree.") var degree = 4.0
    @Option(help: "One-way link delay in milliseconds.") var latencyMs = 5.0
    @Option(help: "Changes to measure.") var changes = 1_000
    @Flag(help: "Print the results as JSON.") var json = false

    func validate() throws {
        guard (2...1000).contains(nodes), degree >= 1, latencyMs >= 0, (1...100_000).contains(changes) else {
            throw ValidationError("nodes 2–1000, degree ≥ 1, latency ≥ 0, changes 1–100000")
        }
    }

    func run() throws {
        let experiment = try MeshExperiment(
            seed: seed, nodes: nodes, degree: degree, latencySeconds: latencyMs / 1000, changes: changes)
        var result: MeshExperiment.Result?
        let wall = try StoreBenchPhases.measure { result = try experiment.run() }
        guard let result else { throw ValidationError("the experiment returned nothing") }
        let reached = result.propagations.filter(\.reachedAll).count
        let gossipRounds = log2(Double(nodes)) + log(Double(nodes))
        let note = "\(nodes) nodes, \(result.edges) edges, \(latencyMs) ms links, seed \(seed), \(reached)/\(changes) reached all"
        let figures = [
            Figure(name: "hops to the last node, p50", value: result.hopsP50, unit: "hops", ceiling: gossipRounds,
                   ceilingName: "gossip log2 n + ln n", note: note),
            Figure(name: "hops to the last node, p99", value: result.hopsP99, unit: "hops", ceiling: gossipRounds,
                   ceilingName: "gossip log2 n + ln n"),
            Figure(name: "simulated time to the last node, p50", value: result.secondsP50 * 1000, unit: "ms"),
            Figure(name: "simulated time to the last node, p99", value: result.secondsP99 * 1000, unit: "ms"),
            Figure(name: "wire bytes per change, whole mesh", value: Double(result.bytes) / Double(changes), unit: "B",
                   note: "\(result.messages) messages; \(String(format: "%.1f", wall)) s wall to simulate"),
        ]
        FigureReport.print(figures, json: json)
        if reached < changes { throw ExitCode(1) }
    }
}
