import ArgumentParser

/// `canopy-bench replicate`: two real `canopyd` processes on loopback (encrypted TCP), N documents
/// of S bytes, one-shot pull from A to B; then a no-op re-sync and 100 changes; peak RSS of both
/// agents and wire bytes per revision. Each rate stands beside raw SQLite inserts of the same
/// bytes measured in the same run.
struct ReplicateBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replicate", abstract: "Two real agents over encrypted loopback TCP: initial replication, re-sync, 100 changes.")

    @Option(help: "Documents to replicate.") var count = 100_000
    @OptionGroup var scenario: ScenarioArguments

    func validate() throws { try scenario.validate(count: count) }
    func run() throws { try scenario.run(count: count) }
}

/// `canopy-bench scale`: the same scenario at 1M documents, for the receiving agent's peak RSS and
/// the re-sync and 100-change times at that size.
struct ScaleBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scale", abstract: "Initial replication of 1M documents between real agents; receiving RSS, re-sync, 100 changes.")

    @Option(help: "Documents to replicate.") var count = 1_000_000
    @OptionGroup var scenario: ScenarioArguments

    func validate() throws { try scenario.validate(count: count) }
    func run() throws { try scenario.run(count: count) }
}

/// The options `replicate` and `scale` share besides the document count.
struct ScenarioArguments: ParsableArguments {
    @Option(help: "Bytes of canonical JSON per document body (about).") var bodyBytes = 1_024
    @Option(help: "Rounds of ceiling run + initial replication into a new receiver; the median round is reported.")
    var rounds = 3
    @OptionGroup var agents: AgentBenchOptions
    @Flag(help: "Print the results as JSON.") var json = false

    func validate(count: Int) throws {
        guard count >= ReplicationScenario.changes, bodyBytes >= 64 else {
            throw ValidationError("--count must be at least \(ReplicationScenario.changes) and --body-bytes at least 64")
        }
        guard rounds >= 1 else { throw ValidationError("--rounds must be at least 1") }
    }

    func run(count: Int) throws {
        FigureReport.print(try ReplicationScenario(count: count, bodyBytes: bodyBytes, rounds: rounds, options: agents).run(), json: json)
    }
}
