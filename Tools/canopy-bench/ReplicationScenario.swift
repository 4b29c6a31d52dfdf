import ArgumentParser
import CanopyAgent
import CanopyCore
import CanopyStore
import Foundation

/// The scenario behind `replicate` and `scale`: two real agents on loopback (encrypted TCP); N
/// documents of about S bytes written into A's database with the library before A starts; B pulls
/// from A once. Measured: the raw SQLite ceiling for the same bytes, A's batched local writes, the
/// initial replication, a no-op re-sync and 100 changes (each over a new connection, resuming from
/// the checkpoint), both agents' peak RSS and the bytes on the wire per revision.
struct ReplicationScenario {
    let count: Int
    let bodyBytes: Int
    let options: AgentBenchOptions
    /// Documents per transaction when loading A and in the ceiling.
    static let loadBatch = 1_000
    /// Documents changed on A in the incremental phase.
    static let changes = 100

    func run() throws -> [Figure] {
        let directory = options.temporaryDirectory()
        defer { directory.remove() }
        let canopyd = try options.canopydPath()
        var figures: [Figure] = []

        let (ceiling, bytes, runs) = try medianCeiling(in: directory.path)
        figures.append(Figure(name: "raw SQLite insert (ceiling)", value: Double(count) / ceiling, unit: "docs/s",
                              note: "median of " + runs.map { String(format: "%.3f", $0) }.joined(separator: " / ") + " s"))
        let a = try BenchAgent(name: "a", parent: directory.path, canopyd: canopyd)
        let b = try BenchAgent(name: "b", parent: directory.path, canopyd: canopyd)
        let load = try loadSource(a)
        figures.append(Figure(name: "batched local writes (library, into A)", value: Double(count) / load.wall, unit: "revs/s",
                              ceiling: Double(count) / ceiling, ceilingName: "raw SQLite",
                              note: String(format: "%.3f s wall, %.3f s CPU", load.wall, load.cpu)))
        for agent in [a, b] {
            try agent.setLimits(batchRevisions: options.batchRevisions, batchesInFlight: options.batchesInFlight)
        }
        try a.start()
        try b.start()
        defer { b.stop(); a.stop() }
        try a.request("peer.add", ["node_id": .string(b.nodeID), "direction": .string("push"), "mode": .string("continuous")])

        let initial = try timedPull(a: a, b: b, expecting: count)
        let traffic = try a.peerBytes()
        figures.append(Figure(name: "initial replication", value: Double(count) / initial.wall, unit: "docs/s",
                              ceiling: Double(count) / ceiling, ceilingName: "raw SQLite",
                              note: String(format: "%.3f s wall; CPU A %.2f s, B %.2f s", initial.wall, initial.cpuA, initial.cpuB)))
        figures.append(Figure(name: "initial replication throughput", value: Double(bytes) / initial.wall / 1e6, unit: "MB/s",
                              note: "canonical body bytes"))
        if let traffic {
            let perRevision = Double(traffic.sent + traffic.received - bytes) / Double(count)
            figures.append(Figure(name: "wire bytes per revision beyond its body", value: perRevision, unit: "B",
                                  note: "both directions, TCP payload incl. handshake, framing, encryption"))
        }

        let resync = try timedPull(a: a, b: b, expecting: count)
        figures.append(Figure(name: "no-op re-sync (new connection)", value: resync.wall * 1000, unit: "ms",
                              note: String(format: "CPU A %.1f ms, B %.1f ms", resync.cpuA * 1000, resync.cpuB * 1000)))

        try b.request("peer.remove", ["node_id": .string(a.nodeID)])
        let last = try changeDocuments(on: a)
        let changed = try timedPull(a: a, b: b, expecting: count, removeFirst: false)
        let seen = try b.request("get", ["doc": .string(last.id)])["doc"]?.objectValue?["_rev"]
        guard seen == .string(last.rev) else { throw ValidationError("B has \(String(describing: seen)) for \(last.id), not \(last.rev)") }
        figures.append(Figure(name: "\(Self.changes) changes (new connection)", value: changed.wall * 1000, unit: "ms",
                              note: String(format: "CPU A %.1f ms, B %.1f ms", changed.cpuA * 1000, changed.cpuB * 1000)))

        figures.append(Figure(name: "peak RSS, sending agent A", value: Double(try a.peakResidentBytes()) / 1_048_576, unit: "MiB"))
        figures.append(Figure(name: "peak RSS, receiving agent B", value: Double(try b.peakResidentBytes()) / 1_048_576, unit: "MiB"))
        return figures
    }

    /// Body `index` as canonical JSON of about `bodyBytes` bytes.
    static func body(_ index: Int, bytes: Int) -> JSONValue {
        let base: [String: JSONValue] = ["index": .int(Int64(index)), "title": .string("Document number \(index)")]
        let fixed = CanonicalJSON.encode(.object(base.merging(["text": .string("")]) { $1 })).count
        let filler = String(repeating: "lorem ipsum dolor sit amet ", count: bytes / 27 + 1)
        return .object(base.merging(["text": .string(String(filler.prefix(max(0, bytes - fixed))))]) { $1 })
    }

    /// Runs of the ceiling; the median is reported. One run takes about half a second, and its
    /// fsyncs and page-cache allocation made single runs differ by up to a third on a shared host,
    /// which was most of the run-to-run spread of the replication's ratio to it.
    static let ceilingRuns = 3

    /// The ceiling's median time over `ceilingRuns` runs, each growing a new database from empty
    /// as the receiver does; each file is removed after its run. The bodies are made again for
    /// every run (untimed): holding them all would cost a gigabyte at 1M documents.
    private func medianCeiling(in directory: String) throws -> (seconds: Double, bytes: Int, runs: [Double]) {
        var runs: [Double] = []
        var bytes = 0
        for run in 0..<Self.ceilingRuns {
            let path = directory + "/raw-\(run).sqlite"
            let (seconds, written) = try rawCeiling(path: path)
            for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) }
            runs.append(seconds)
            bytes = written
        }
        return (BenchClock.percentile(runs.sorted(), 0.5), bytes, runs)
    }

    /// Plain INSERTs of the same canonical bytes, `loadBatch` per transaction; only the
    /// transactions are timed (the bodies are made between them). Returns seconds and body bytes.
    private func rawCeiling(path: String) throws -> (seconds: Double, bytes: Int) {
        let db = try Database(path: path)
        try db.execute("CREATE TABLE raw (id TEXT PRIMARY KEY, body BLOB NOT NULL)")
        var seconds = 0.0
        var bytes = 0
        for start in stride(from: 0, to: count, by: Self.loadBatch) {
            let indices = start..<min(start + Self.loadBatch, count)
            let rows = indices.map { (StoreBenchData.documentID($0), CanonicalJSON.encode(Self.body($0, bytes: bodyBytes))) }
            bytes += rows.reduce(0) { $0 + $1.1.count }
            let began = BenchClock.now()
            try db.transaction { db in
                let statement = try db.cached("INSERT INTO raw(id, body) VALUES (?, ?)")
                for (id, body) in rows {
                    try statement.bind(id, at: 1)
                    try statement.bind(body, at: 2)
                    try statement.run()
                }
            }
            seconds += BenchClock.now() - began
        }
        return (seconds, bytes)
    }

    /// Writes the documents into A's database with the library (A is not running yet), timing
    /// only the `putBatch` calls.
    private func loadSource(_ a: BenchAgent) throws -> (wall: Double, cpu: Double) {
        let store = try DocumentStore(path: a.databasePath)
        var wall = 0.0
        let cpuStart = BenchClock.cpuSeconds(pid: getpid())
        var building = 0.0
        for start in stride(from: 0, to: count, by: Self.loadBatch) {
            let buildStart = BenchClock.cpuSeconds(pid: getpid())
            let writes = (start..<min(start + Self.loadBatch, count)).map {
                LocalWrite(documentID: StoreBenchData.documentID($0), body: Self.body($0, bytes: bodyBytes), replacing: nil)
            }
            building += BenchClock.cpuSeconds(pid: getpid()) - buildStart
            let began = BenchClock.now()
            _ = try store.putBatch(writes)
            wall += BenchClock.now() - began
        }
        return (wall, BenchClock.cpuSeconds(pid: getpid()) - cpuStart - building)
    }

    /// Configures B to pull from A once (removing a previous configuration first) and waits until
    /// `sync` reports it done and B holds `expecting` documents. Timed from the `peer.add` that
    /// opens the connection.
    private func timedPull(a: BenchAgent, b: BenchAgent, expecting: Int, removeFirst: Bool = true) throws
        -> (wall: Double, cpuA: Double, cpuB: Double)
    {
        let client = try b.client()
        if removeFirst, case .array(let peers)? = try BenchAgent.checked(client.request("peers"), "peers")["peers"], !peers.isEmpty {
            try BenchAgent.checked(client.request("peer.remove", ["node_id": .string(a.nodeID)]), "peer.remove")
        }
        let address = try a.listenAddress()
        let cpuA = BenchClock.cpuSeconds(pid: a.pid)
        let cpuB = BenchClock.cpuSeconds(pid: b.pid)
        let start = BenchClock.now()
        try BenchAgent.checked(client.request("peer.add", [
            "node_id": .string(a.nodeID), "address": .string(address), "direction": .string("pull"), "mode": .string("once"),
        ]), "peer.add")
        try BenchAgent.checked(client.request("sync", ["node_id": .string(a.nodeID), "wait": .bool(true)]), "sync")
        var wall = BenchClock.now() - start
        let cpu = (BenchClock.cpuSeconds(pid: a.pid) - cpuA, BenchClock.cpuSeconds(pid: b.pid) - cpuB)
        // Checked after the clock stops: `doc_count` is a count(*), O(documents), which would
        // otherwise dominate a no-op re-sync of 1M documents. Should `sync` ever return before
        // B holds everything, the time runs until it does.
        while try b.documentCount(client) < expecting {
            guard BenchClock.now() - start < 3_600 else { throw ValidationError("B did not reach \(expecting) documents") }
            usleep(1_000)
            wall = BenchClock.now() - start
        }
        return (wall, cpu.0, cpu.1)
    }

    /// Edits `changes` documents spread over A's set through A's admin socket; returns the last
    /// one's id and new revision.
    private func changeDocuments(on a: BenchAgent) throws -> (id: String, rev: String) {
        let client = try a.client()
        var last = ("", "")
        for step in 0..<Self.changes {
            let id = StoreBenchData.documentID(step * max(1, count / Self.changes))
            guard case .string(let rev)? = try BenchAgent.checked(client.request("get", ["doc": .string(id)]), "get")["doc"]?
                .objectValue?["_rev"]
            else { throw ValidationError("no _rev for \(id)") }
            let response = try BenchAgent.checked(
                client.request("put", ["doc": .string(id), "rev": .string(rev), "body": Self.body(step + count, bytes: bodyBytes)]), "put")
            guard case .string(let newRev)? = response["rev"] else { throw ValidationError("put returned no rev") }
            last = (id, newRev)
        }
        return last
    }
}
