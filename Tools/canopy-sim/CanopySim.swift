import ArgumentParser
import CanopySimulation

#if canImport(Glibc)
import Glibc
#endif

/// `canopy-sim`: runs the deterministic simulator (`Protocol/design.md` §7) for one seed or a range of seeds, or
/// the 100-node mesh propagation experiment.
@main
struct CanopySim: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "canopy-sim",
        abstract: "Deterministic multi-node simulation of Canopy replication with fault injection.",
        subcommands: [Run.self, Mesh.self],
        defaultSubcommand: Run.self)
}

extension SimulationTopology: ExpressibleByArgument {}
extension FaultLevel: ExpressibleByArgument {}
extension SimulationPolicy: ExpressibleByArgument {}

/// Runs seeds and checks the invariants; exits non-zero on a violation.
struct Run: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run seeds through fault, heal and check phases.")

    @Option(help: "One seed.") var seed: UInt64?
    @Option(help: "A range of seeds, A..B (inclusive).") var seeds: String?
    @Option(help: "Number of nodes (default: from the seed, 3–5; 2 for pair).") var nodes: Int?
    @Option(help: "pair, line, ring, mesh or random (default: from the seed).") var topology: SimulationTopology?
    @Option(help: "none, low or high (default: from the seed).") var faults: FaultLevel?
    @Option(help: "automatic, merge, throwing, manual or rules (default: from the seed).") var policy: SimulationPolicy?
    @Option(help: "Size of the document id pool.") var docs: Int = 12
    @Option(name: .customLong("revs-limit"), help: "The stores' revsLimit (default: from the seed, 12 or 1000).") var revsLimit: Int?
    @Option(name: .customLong("batch-size"), help: "Changes per batch (default: from the seed, 3, 10 or 50).") var batchSize: Int?
    @Option(help: "Batches in flight (default: from the seed, 1, 2 or 8).") var window: Int?
    @Option(help: "Virtual seconds of the fault phase.") var seconds: Double = 40
    @Option(help: "Print this document's message-by-message history.") var trace: String?
    @Flag(name: .customLong("replay-check"), help: "Run every seed twice and compare the trace hashes (invariant 6).") var replayCheck = false
    @Flag(name: .customLong("inline-worker"), help: "Check and write received revisions inline instead of on the simulated concurrent worker.") var inlineWorker = false
    @Flag(name: .customLong("no-storage-faults"), help: "Inject no storage faults (failed commits, full disk, crash inside a commit).") var noStorageFaults = false
    @Option(help: ArgumentHelp(
        "Databases per node (default 1: one database, default, shared read-write with every neighbour, as agents share it after peer add).",
        discussion: """
            With 2 or more, every node holds default and some of db1, db2, … (drawn from the seed), one store each, \
            and one connection per neighbour carries every database the two share (protocol version 2, as \
            with one database; both ends dial and the simultaneous-connect rule keeps one connection). What each node lets each neighbour do to each database is drawn from the seed: read, write or \
            read-write, optionally only ids starting a- or b-, or not shared at all (the node refuses the attach). \
            Faults: partitions, clogs, resets, pauses, crashes, in-connection faults, and storage faults on each \
            database's store (failed commits, full disk, a node dying inside a commit of one store); \
            policies other than merge run as automatic. Checked: no document reaches a node that may not read it \
            (7), no revision stored from a peer that may not write it (8), no written revision missing where the shares \
            let it go (2), and convergence along the ways documents may flow (1).
            """)) var databases: Int = 1
    @Option(help: ArgumentHelp(
        "Lying nodes, with --databases 2 or more (default 0).",
        discussion: """
            A liar serves its peers beyond their subscriptions: it offers and sends documents outside the prefix a peer \
            subscribed with (its own shares still bound what it serves). The peers refuse them as they arrive; the \
            summary counts them (sharing rejected=, and refusedByPeer= at the liars). Liars are drawn from the seed, \
            nodes with a peer that subscribes to them with a narrower prefix first; the invariants are checked at every node.
            """)) var liars: Int = 0

    @Flag(help: ArgumentHelp(
        "Attach content in the workload (one database only).",
        discussion: """
            Some writes name new content of 1 byte to 600 KiB (up to three 256 KiB parts on the wire), or content the \
            node attached before; peers fetch it in parts through every fault. Checked after the heal: no revision \
            still waits for content, and every open leaf's attachments are on each node with the right digest (9).
            """)) var attachments = false

    func validate() throws {
        guard (seed == nil) != (seeds == nil) else { throw ValidationError("give exactly one of --seed or --seeds") }
        if let seeds, Self.parseRange(seeds) == nil { throw ValidationError("--seeds must look like 1..100") }
        if let nodes, !(2...64).contains(nodes) { throw ValidationError("--nodes must be 2–64") }
        if let revsLimit, !(2...100_000).contains(revsLimit) { throw ValidationError("--revs-limit must be 2–100000") }
        if let batchSize, !(1...1000).contains(batchSize) { throw ValidationError("--batch-size must be 1–1000") }
        if let window, !(1...16).contains(window) { throw ValidationError("--window must be 1–16") }
        guard (1...10_000).contains(docs) else { throw ValidationError("--docs must be 1–10000") }
        guard (1...16).contains(databases) else { throw ValidationError("--databases must be 1–16") }
        guard liars >= 0, liars == 0 || databases > 1 else { throw ValidationError("--liars needs --databases 2 or more") }
        guard !attachments || databases == 1 else { throw ValidationError("--attachments runs with one database") }
    }

    /// One run.
    static func run(_ configuration: SimulationConfiguration, quiet: Bool = false) throws -> SimulationReport {
        let traced = quiet ? nil : configuration.traceDocument
        let simulation = try Simulation(configuration)
        if let traced { simulation.beforeChecks = { print(try $0.describeTrees(of: traced)) } }
        return try simulation.run()
    }

    static func parseRange(_ text: String) -> ClosedRange<UInt64>? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: true)
        guard parts.count == 2, text.contains(".."), let low = UInt64(parts[0]), let high = UInt64(parts[1]), low <= high else { return nil }
        return low...high
    }

    func run() throws {
        let range = seed.map { $0...$0 } ?? Self.parseRange(seeds ?? "")!
        var failed: [UInt64] = []
        for seed in range {
            var configuration = SimulationConfiguration(
                seed: seed, nodes: nodes, topology: topology, faults: faults, policy: policy, documents: docs,
                faultPhaseSeconds: seconds, revsLimit: revsLimit, batchSize: batchSize, window: window, traceDocument: trace)
            if inlineWorker { configuration.worker = .inline }
            if noStorageFaults { configuration.storageFaults = false }
            configuration.databases = databases
            configuration.liars = liars
            configuration.attachments = attachments
            let report = try Self.run(configuration)
            print(report.summary)
            // Written now, not when a buffer fills: a seed that crashes the process is the one
            // after the last line, even when the output goes to a pipe or a file.
            fflush(nil)
            var violations = report.violations.map(\.description)
            if replayCheck {
                let again = try Self.run(configuration, quiet: true)
                if again.traceHash != report.traceHash {
                    violations.append("invariant 6: the same seed gave trace \(again.traceHash.prefix(16)) on the second run")
                }
            }
            if !report.violations.isEmpty {
                print(report.failureText)
            } else if !violations.isEmpty {
                print("VIOLATION seed \(seed):\n  " + violations.joined(separator: "\n  ") + "\nreproduce: \(configuration.commandLine) --replay-check")
            }
            if let trace {
                print("history of \(trace):")
                for line in report.documentLines { print("  \(line)") }
            }
            if !violations.isEmpty { failed.append(seed) }
        }
        if range.count > 1 {
            print("\(range.count) seeds, \(failed.count) with violations\(failed.isEmpty ? "" : ": \(failed.map(String.init).joined(separator: " "))")")
        }
        if !failed.isEmpty { throw ExitCode(1) }
    }
}

/// The propagation experiment: how far and how fast one change travels through a large mesh.
struct Mesh: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Measure hops and time for changes to reach every node of a random mesh.")

    @Option(help: "Seed of the topology and the writers.") var seed: UInt64 = 1
    @Option(help: "Nodes.") var nodes: Int = 100
    @Option(help: "Average degree.") var degree: Double = 4
    @Option(help: "One-way link delay in milliseconds.") var latencyMs: Double = 5
    @Option(help: "Changes to measure.") var changes: Int = 1000

    func validate() throws {
        guard (2...1000).contains(nodes), degree >= 1, latencyMs >= 0, (1...100_000).contains(changes) else {
            throw ValidationError("nodes 2–1000, degree ≥ 1, latency ≥ 0, changes 1–100000")
        }
    }

    func run() throws {
        let experiment = try MeshExperiment(seed: seed, nodes: nodes, degree: degree, latencySeconds: latencyMs / 1000, changes: changes)
        let result = try experiment.run()
        let reached = result.propagations.filter(\.reachedAll).count
        print("mesh: \(nodes) nodes, \(result.edges) edges (average degree \(String(Double(2 * result.edges) / Double(nodes)))), \(latencyMs) ms links, seed \(seed)")
        print("changes: \(changes), reached every node: \(reached)")
        print("hops to the last node: p50 \(Int(result.hopsP50)), p99 \(Int(result.hopsP99))")
        print("simulated time to the last node: p50 \(Int((result.secondsP50 * 1000).rounded())) ms, p99 \(Int((result.secondsP99 * 1000).rounded())) ms")
        print("messages \(result.messages), bytes \(result.bytes)")
        if reached < changes { throw ExitCode(1) }
    }
}
