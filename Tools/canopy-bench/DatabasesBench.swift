import ArgumentParser
import CanopyAdmin
import CanopyAgent
import CanopyCore
import CanopyStore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// `canopy-bench databases`: several databases between real agents, each figure beside its
/// ceiling from the same run (method: Tools/canopy-bench/README.md, *databases*).
///
/// - **split**: N documents in one database, then the same N split over D databases, each pulled
///   by a new agent from the same source over one connection; the split rate beside the
///   one-database rate.
/// - **idle**: one agent with M databases, each shared read-write with P peers (which hold the
///   same M), all connected and caught up: its CPU over a quiet interval and its RSS.
/// - **head-of-line**: while a peer pulls N documents of one database, one change in another
///   database: the time until the peer has it, beside the same probe with nothing else running.
struct DatabasesBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "databases", abstract: "Several databases between real agents: split throughput, idle cost, head-of-line latency.")

    @Option(help: "Documents in the split and head-of-line phases.") var count = 100_000
    @Option(help: "Databases the split phase divides them over.") var databases = 10
    @Option(help: "Databases on the idle agent.") var idleDatabases = 100
    @Option(help: "Peers of the idle agent.") var idlePeers = 4
    @Option(help: "Seconds of quiet over which the idle agent's CPU is measured.") var idleSeconds = 20.0
    @Option(help: "Bytes of canonical JSON per document body (about).") var bodyBytes = 1_024
    @Option(help: "Probes of the head-of-line phase.") var probes = 5
    @Option(help: "The phases to run: split, head-of-line, idle (comma-separated).") var phases = "split,head-of-line,idle"
    @OptionGroup var agents: AgentBenchOptions
    @Flag(help: "Print the results as JSON.") var json = false

    func validate() throws {
        guard count >= databases, databases >= 2, idleDatabases >= 1, idlePeers >= 1, probes >= 1 else {
            throw ValidationError("need count ≥ databases ≥ 2, and at least one idle database, idle peer and probe")
        }
    }

    func run() throws {
        let directory = agents.temporaryDirectory()
        defer { directory.remove() }
        let canopyd = try agents.canopydPath()
        let chosen = Set(phases.split(separator: ",").map(String.init))
        var figures: [Figure] = []
        if chosen.contains("split") { figures += try split(directory.path, canopyd) }
        if chosen.contains("head-of-line") { figures += try headOfLine(directory.path, canopyd) }
        if chosen.contains("idle") { figures += try idle(directory.path, canopyd) }
        FigureReport.print(figures, json: json)
    }

    // MARK: Phases

    /// One source with the documents in `default` and again split over `databases` databases;
    /// one receiver per layout, each started with everything configured (so both times include
    /// an agent's start), timed until the last document of every database has arrived.
    private func split(_ parent: String, _ canopyd: String) throws -> [Figure] {
        let names = (0..<databases).map { DatabaseName(validating: "part\($0)")! }
        let source = try agent("source", parent, canopyd)
        try load(source, .default, range: 0..<count)
        let per = count / databases
        for (index, name) in names.enumerated() {
            try load(source, name, range: index * per..<(index == databases - 1 ? count : (index + 1) * per))
        }
        let one = try agent("one", parent, canopyd)
        let many = try agent("many", parent, canopyd)
        try source.appendConfig(Self.peer(one, address: nil, mode: "continuous") + Self.peer(many, address: nil, mode: "continuous")
            + names.map { Self.share($0, with: many, "read") }.joined() + Self.share(.default, with: many, "none"))
        try source.start()
        defer { source.stop() }
        let address = try source.listenAddress()

        try one.appendConfig(Self.peer(source, address: address, mode: "once"))
        let oneWall = try timedStart(one, waitingFor: [(.default, count - 1)])
        one.stop()

        for name in names { try Self.emptyDatabase(many, name) }
        try many.appendConfig(Self.peer(source, address: address, mode: "once")
            + names.map { Self.share($0, with: source, "write") }.joined() + Self.share(.default, with: source, "none"))
        let lastOfEach = names.enumerated().map { index, name in (name, index == databases - 1 ? count - 1 : (index + 1) * per - 1) }
        let manyWall = try timedStart(many, waitingFor: lastOfEach)
        many.stop()
        let oneRate = Double(count) / oneWall
        return [
            Figure(name: "1 database of \(count) documents, pulled", value: oneRate, unit: "docs/s",
                   note: String(format: "%.3f s from the receiver's start", oneWall)),
            Figure(name: "\(databases) databases of \(per) documents, pulled over one connection", value: Double(count) / manyWall, unit: "docs/s",
                   ceiling: oneRate, ceilingName: "1 database", note: String(format: "%.3f s; target ≥ 80%%", manyWall)),
        ]
    }

    /// A peer pulls `count` documents of `big` continuously; meanwhile one document is written
    /// into `small` at each probe, timed until the peer has it. The ceiling: the same probe
    /// afterwards, with nothing else to replicate.
    private func headOfLine(_ parent: String, _ canopyd: String) throws -> [Figure] {
        let big = DatabaseName(validating: "big")!
        let small = DatabaseName(validating: "small")!
        let a = try agent("hol-a", parent, canopyd)
        let b = try agent("hol-b", parent, canopyd)
        try load(a, big, range: 0..<count)
        try Self.emptyDatabase(a, small)
        for name in [big, small] { try Self.emptyDatabase(b, name) }
        try a.appendConfig(Self.peer(b, address: nil, mode: "continuous") + Self.share(big, with: b, "read") + Self.share(small, with: b, "read"))
        try a.start()
        defer { a.stop() }
        try b.appendConfig(Self.peer(a, address: try a.listenAddress(), mode: "continuous")
            + Self.share(big, with: a, "write") + Self.share(small, with: a, "write"))
        try b.start()
        defer { b.stop() }
        let reader = try b.client()
        let writer = try a.client()
        // Until `big` is flowing.
        try Self.wait("the first documents of big on the peer", limit: 60) { try Self.has(reader, big, StoreBenchData.documentID(0)) }
        var busy: [Double] = []
        for probe in 0..<probes {
            busy.append(try Self.probe(writer, reader, small, id: "busy-\(probe)"))
            usleep(50_000)
        }
        let stillBusy = !(try Self.has(reader, big, StoreBenchData.documentID(count - 1)))
        try Self.wait("all of big on the peer", limit: 600) { try Self.has(reader, big, StoreBenchData.documentID(count - 1)) }
        var quiet: [Double] = []
        for probe in 0..<probes { quiet.append(try Self.probe(writer, reader, small, id: "quiet-\(probe)")) }
        busy.sort()
        quiet.sort()
        let median = BenchClock.percentile(quiet, 0.5)
        return [
            Figure(name: "a change in another database while \(count) documents flow, worst of \(probes)", value: busy.last! * 1000, unit: "ms",
                   ceiling: median * 1000, ceilingName: "the same change, nothing flowing (median)",
                   note: String(format: "median %.1f ms; target ≤ 50 ms%@", BenchClock.percentile(busy, 0.5) * 1000,
                                stillBusy ? "" : "; big had finished before the last probe: raise --count")),
        ]
    }

    /// An agent with `idleDatabases` databases, each shared read-write with `idlePeers` peers,
    /// all connected and caught up: its CPU over `idleSeconds` and its resident memory.
    private func idle(_ parent: String, _ canopyd: String) throws -> [Figure] {
        let names = (0..<idleDatabases).map { DatabaseName(validating: "db\($0)")! }
        let hub = try agent("hub", parent, canopyd)
        let peers = try (0..<idlePeers).map { try agent("peer\($0)", parent, canopyd) }
        for name in names {
            try Self.emptyDatabase(hub, name)
            for peer in peers { try Self.emptyDatabase(peer, name) }
        }
        try hub.appendConfig(peers.map { peer in
            Self.peer(peer, address: nil, mode: "continuous") + names.map { Self.share($0, with: peer, "read-write") }.joined()
        }.joined())
        try hub.start()
        defer { hub.stop() }
        let address = try hub.listenAddress()
        for peer in peers {
            try peer.appendConfig(Self.peer(hub, address: address, mode: "continuous") + names.map { Self.share($0, with: hub, "read-write") }.joined())
            try peer.start()
        }
        defer { for peer in peers { peer.stop() } }
        let client = try hub.client()
        try Self.wait("every database idle with every peer", limit: 300) {
            let rows = try BenchAgent.checked(client.call(Admin.Peers())).peers
            return rows.count == idlePeers && rows.allSatisfy { row in
                row.databases.count == idleDatabases + 1 && row.databases.allSatisfy { $0.state == .idle }
            }
        }
        let cpuStart = BenchClock.cpuSeconds(pid: hub.pid)
        let start = BenchClock.now()
        usleep(useconds_t(idleSeconds * 1_000_000))
        let cpu = (BenchClock.cpuSeconds(pid: hub.pid) - cpuStart) / (BenchClock.now() - start)
        let resident = try Self.residentBytes(hub.pid)
        return [
            Figure(name: "idle agent, \(idleDatabases) databases × \(idlePeers) peers: CPU", value: cpu * 100, unit: "% of a core",
                   ceiling: 1, ceilingName: "target", note: String(format: "over %.0f s, all channels idle", idleSeconds)),
            Figure(name: "idle agent, \(idleDatabases) databases × \(idlePeers) peers: RSS", value: Double(resident) / 1_048_576, unit: "MiB",
                   ceiling: 128, ceilingName: "target", note: "VmRSS"),
        ]
    }

    // MARK: Helpers

    /// A new agent, with the `[limits]` given on the command line.
    private func agent(_ name: String, _ parent: String, _ canopyd: String) throws -> BenchAgent {
        let agent = try BenchAgent(name: name, parent: parent, canopyd: canopyd)
        try agent.setLimits(batchRevisions: agents.batchRevisions, batchesInFlight: agents.batchesInFlight)
        return agent
    }

    /// Writes documents `range` into `database` of a stopped agent with the library (the file is
    /// made when missing; a database besides default also gets its config section).
    private func load(_ agent: BenchAgent, _ database: DatabaseName, range: Range<Int>) throws {
        if database != .default { try Self.emptyDatabase(agent, database) }
        let store = try DocumentStore(path: Self.path(agent, database))
        for start in stride(from: range.lowerBound, to: range.upperBound, by: 1_000) {
            _ = try store.putBatch((start..<min(start + 1_000, range.upperBound)).map {
                LocalWrite(documentID: StoreBenchData.documentID($0), body: ReplicationScenario.body($0, bytes: bodyBytes), replacing: nil)
            })
        }
    }

    /// Makes an empty database on a stopped agent: its file and its config section.
    static func emptyDatabase(_ agent: BenchAgent, _ name: DatabaseName) throws {
        let path = path(agent, name)
        guard !FileManager.default.fileExists(atPath: path) else { return }
        try FileManager.default.createDirectory(atPath: agent.dataDir + "/databases", withIntermediateDirectories: true)
        _ = try DocumentStore(path: path)
        try agent.appendConfig("[database \(name)]\n")
    }

    static func path(_ agent: BenchAgent, _ name: DatabaseName) -> String {
        DataDirectory(path: agent.dataDir).databasePath(name)
    }

    static func peer(_ peer: BenchAgent, address: String?, mode: String) -> String {
        "[peer \(peer.nodeID)]\naddress = \(address ?? "-")\nmode = \(mode)\n\n"
    }

    static func share(_ database: DatabaseName, with peer: BenchAgent, _ access: String) -> String {
        "[share \(database) \(peer.nodeID)]\naccess = \(access)\n\n"
    }

    /// Starts `agent` and returns the seconds until each `(database, index)` document is there.
    private func timedStart(_ agent: BenchAgent, waitingFor last: [(DatabaseName, Int)]) throws -> Double {
        let start = BenchClock.now()
        try agent.start()
        let client = try agent.client()
        var waiting = last
        while !waiting.isEmpty {
            guard BenchClock.now() - start < 3_600 else { throw ValidationError("\(agent.name) did not receive everything") }
            waiting.removeAll { (try? Self.has(client, $0.0, StoreBenchData.documentID($0.1))) == true }
            if !waiting.isEmpty { usleep(1_000) }
        }
        return BenchClock.now() - start
    }

    static func has(_ client: AdminSocketClient, _ database: DatabaseName, _ id: String) throws -> Bool {
        guard case .success = try client.call(Admin.GetDocument(db: database.text, doc: id)) else { return false }
        return true
    }

    /// Writes one document into `database` on A and returns the seconds until B has it.
    static func probe(_ writer: AdminSocketClient, _ reader: AdminSocketClient, _ database: DatabaseName, id: String) throws -> Double {
        let start = BenchClock.now()
        try BenchAgent.checked(writer.call(Admin.PutDocument(db: database.text, doc: id, body: .object(["probe": .bool(true)]))))
        while try !has(reader, database, id) {
            guard BenchClock.now() - start < 60 else { throw ValidationError("\(id) never arrived") }
            usleep(200)
        }
        return BenchClock.now() - start
    }

    static func wait(_ what: String, limit: Double, _ condition: () throws -> Bool) throws {
        let start = BenchClock.now()
        while try !condition() {
            guard BenchClock.now() - start < limit else { throw ValidationError("timed out waiting for \(what)") }
            usleep(5_000)
        }
    }

    /// The process's resident set now (`VmRSS`), in bytes.
    static func residentBytes(_ pid: Int32) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kib = Int(line.split(separator: " ").dropFirst().first ?? "")
        else { throw ValidationError("no VmRSS for \(pid)") }
        return kib * 1024
    }
}
