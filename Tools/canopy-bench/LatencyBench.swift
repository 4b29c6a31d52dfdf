import ArgumentParser
import CanopyAdmin
import CanopyAgent
import CanopyCore
import Foundation

/// `canopy-bench latency`: two real agents replicating continuously both ways over encrypted
/// loopback TCP. Each sample writes a document on A (admin `put`) and waits for B's admin event
/// stream to report it; the ceiling is the round trip of a no-op admin request (`stats`) to B,
/// measured the same way in the same run.
struct LatencyBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "latency", abstract: "Continuous replication: write on A to event on B, p50/p90/p99.")

    @Option(help: "Samples.") var samples = 1_000
    @OptionGroup var agents: AgentBenchOptions
    @Flag(help: "Print the results as JSON.") var json = false

    func validate() throws {
        guard (1...1_000_000).contains(samples) else { throw ValidationError("--samples must be 1…1000000") }
    }

    func run() throws {
        let directory = agents.temporaryDirectory()
        defer { directory.remove() }
        let canopyd = try agents.canopydPath()
        let a = try BenchAgent(name: "a", parent: directory.path, canopyd: canopyd)
        let b = try BenchAgent(name: "b", parent: directory.path, canopyd: canopyd)
        for agent in [a, b] {
            try agent.setLimits(batchRevisions: agents.batchRevisions, batchesInFlight: agents.batchesInFlight)
        }
        try a.start()
        try b.start()
        defer { b.stop(); a.stop() }
        try a.call(Admin.AddPeer(.init(nodeID: b.nodeID, address: try b.listenAddress())))
        try b.call(Admin.AddPeer(.init(nodeID: a.nodeID, address: try a.listenAddress())))

        let writer = try a.client()
        let events = try b.client()
        try BenchAgent.checked(events.call(Admin.Subscribe()))
        _ = try propagate("warm-up", writer: writer, events: events)  // waits for the connection too
        let cpuA = BenchClock.cpuSeconds(pid: a.pid)
        let cpuB = BenchClock.cpuSeconds(pid: b.pid)
        var latencies: [Double] = []
        for index in 0..<samples {
            latencies.append(try propagate("latency-\(index)", writer: writer, events: events))
        }
        let cpu = (BenchClock.cpuSeconds(pid: a.pid) - cpuA + BenchClock.cpuSeconds(pid: b.pid) - cpuB) / Double(samples)
        let probe = try b.client()
        var roundTrips: [Double] = []
        for _ in 0..<samples {
            let start = BenchClock.now()
            try BenchAgent.checked(probe.call(Admin.Stats()))
            roundTrips.append(BenchClock.now() - start)
        }
        latencies.sort()
        roundTrips.sort()
        var figures: [Figure] = []
        for (label, fraction) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)] {
            figures.append(Figure(
                name: "write on A → event on B, \(label)", value: BenchClock.percentile(latencies, fraction) * 1000, unit: "ms",
                ceiling: BenchClock.percentile(roundTrips, fraction) * 1000, ceilingName: "admin round trip to B",
                note: label == "p50" ? String(format: "%d samples; CPU of both agents %.2f ms per change", samples, cpu * 1000) : ""))
        }
        FigureReport.print(figures, json: json)
    }

    /// Puts document `id` on A and returns the seconds until B's event stream names it.
    private func propagate(_ id: String, writer: AdminSocketClient, events: AdminSocketClient) throws -> Double {
        let start = BenchClock.now()
        try BenchAgent.checked(writer.call(Admin.PutDocument(doc: id, body: .object(["sample": .string(id)]))))
        while true {
            guard BenchClock.now() - start < BenchAgent.stopWaitSeconds else { throw ValidationError("\(id) never reached B") }
            guard case .event(let event) = try AdminLine.read(try events.readLine()), event.type.hasPrefix("document."),
                event.document?.doc == id
            else { continue }
            return BenchClock.now() - start
        }
    }
}
