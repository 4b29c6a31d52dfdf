import ArgumentParser
import CanopyCore
import CanopyReplication
import CanopySimulation
import CanopyStore
import Foundation

/// `canopy-bench engine`: the replication engine alone, in one process: node A's documents
/// replicate to node B over an in-memory link that still encodes and decodes every message with
/// the wire codec (no sockets, no encryption). It bounds what the agent can reach and is the
/// figure to profile; `canopy-bench replicate` measures the real agents.
struct EngineBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "engine", abstract: "In-process replication (wire codec, real stores, no sockets) vs the SQLite ceiling.")

    @Option(help: "Documents to replicate.") var count = 100_000
    @Option(help: "Documents per changes batch.") var batch = 500
    @Option(help: "Batches in flight.") var window = 8
    @Flag(help: "Print the results as JSON.") var json = false

    func run() throws {
        let harness = try ReplicationHarness(seed: 1)
        let bodies = (0..<count).map { StoreBenchData.body($0) }
        let canonical = bodies.map { CanonicalJSON.encode($0) }
        let ceiling = try StoreBenchPhases.rawCeiling(
            path: harness.directory.appendingPathComponent("raw.sqlite").path, bodies: canonical, batch: 1000)

        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        var writes: [LocalWrite] = []
        for (index, body) in bodies.enumerated() {
            writes.append(LocalWrite(documentID: StoreBenchData.documentID(index), body: body, replacing: nil))
            if writes.count == 1000 {
                _ = try a.store.putBatch(writes)
                writes = []
            }
        }
        if !writes.isEmpty { _ = try a.store.putBatch(writes) }

        let configuration = ReplicationConfiguration(direction: .both, continuous: false, batchSize: batch, window: window)
        var finished = false
        var connection: ReplicationHarness.Connection?
        let seconds = try StoreBenchPhases.measure {
            connection = harness.connect(a, b, configuration: configuration)
            finished = harness.runUntilQuiescent(maxSeconds: 100_000)
        }
        guard finished, let connection else { throw ValidationError("replication did not finish") }
        guard try b.store.documentCount == count else { throw ValidationError("B holds \(try b.store.documentCount) of \(count)") }

        let bodyBytes = canonical.reduce(0) { $0 + $1.count }
        let wireBytes = connection.link.ends.0.bytesSent + connection.link.ends.1.bytesSent
        let overhead = Double(wireBytes - bodyBytes) / Double(count)
        let results = [
            BenchResult(name: "raw SQLite insert (ceiling)", operations: count, seconds: ceiling),
            BenchResult(name: "engine: initial replication", operations: count, seconds: seconds),
        ]
        try BenchReport.print(results, ceilingRate: Double(count) / ceiling, json: json)
        if !json {
            print(String(format: "message bytes per revision beyond its body: %.1f (both directions, before framing and encryption)", overhead))
        }
    }
}
