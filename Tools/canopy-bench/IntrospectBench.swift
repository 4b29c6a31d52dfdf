import ArgumentParser
import CanopyAdmin
import CanopyAgent
import CanopyCore
import CanopyStore
import Foundation

/// `canopy-bench introspect`: what asking an agent about itself costs when its database is
/// large. N documents are written into the agent's database with the library before it starts;
/// then `status`, `stats` and `db.list` are each asked `--samples` times on one admin connection.
/// The ceiling is the round trip of `peers` (no store work) on the same connection, in the same
/// run. A monitor polling `status` should cost the agent the same at 1M documents as at 1k.
struct IntrospectBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "introspect", abstract: "status, stats and db.list round trips against an agent holding N documents.")

    @Option(help: "Documents in the agent's database.") var count = 1_000_000
    @Option(help: "Requests of each command.") var samples = 200
    @OptionGroup var agents: AgentBenchOptions
    @Flag(help: "Print the results as JSON.") var json = false

    func validate() throws {
        guard (1...10_000_000).contains(count) else { throw ValidationError("--count must be 1…10000000") }
        guard (1...100_000).contains(samples) else { throw ValidationError("--samples must be 1…100000") }
    }

    func run() throws {
        let directory = agents.temporaryDirectory()
        defer { directory.remove() }
        let agent = try BenchAgent(name: "a", parent: directory.path, canopyd: try agents.canopydPath())
        let store = try DocumentStore(path: agent.databasePath)
        for start in stride(from: 0, to: count, by: 5_000) {
            _ = try store.putBatch((start..<min(start + 5_000, count)).map {
                LocalWrite(documentID: StoreBenchData.documentID($0), body: .object(["n": .int(Int64($0))]), replacing: nil)
            })
        }
        let started = BenchClock.now()
        try agent.start()
        let startSeconds = BenchClock.now() - started
        defer { agent.stop() }
        let client = try agent.client()
        func timed(_ call: () throws -> Void) throws -> [Double] {
            var seconds: [Double] = []
            for _ in 0..<samples {
                let start = BenchClock.now()
                try call()
                seconds.append(BenchClock.now() - start)
            }
            return seconds.sorted()
        }
        let documents = try BenchAgent.checked(client.call(Admin.Status())).counts.docCount
        guard documents == Int64(count) else { throw ValidationError("the agent counts \(documents) documents, not \(count)") }
        let ceiling = try timed { _ = try BenchAgent.checked(client.call(Admin.Peers())) }
        let measured: [(String, [Double])] = [
            ("status", try timed { _ = try BenchAgent.checked(client.call(Admin.Status())) }),
            ("stats", try timed { _ = try BenchAgent.checked(client.call(Admin.Stats())) }),
            ("db.list", try timed { _ = try BenchAgent.checked(client.call(Admin.ListDatabases())) }),
        ]
        var figures: [Figure] = []
        for (name, seconds) in measured {
            for (label, fraction) in [("p50", 0.5), ("p99", 0.99)] {
                figures.append(Figure(
                    name: "\(name) at \(count) documents, \(label)", value: BenchClock.percentile(seconds, fraction) * 1000, unit: "ms",
                    ceiling: BenchClock.percentile(ceiling, fraction) * 1000, ceilingName: "peers round trip (no store work)",
                    note: name == "status" && label == "p50" ? String(format: "%d samples each; agent start to socket answering %.2f s", samples, startSeconds) : ""))
            }
        }
        FigureReport.print(figures, json: json)
    }
}
