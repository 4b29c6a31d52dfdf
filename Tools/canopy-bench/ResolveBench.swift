import ArgumentParser
import CanopyAdmin
import CanopyAgent
import CanopyCore
import CanopyStore
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// `canopy-bench resolve`: conflicts settled by real agents, three figures each beside a ceiling
/// measured in the same run.
///
/// - latency: one conflict at a time reaches B from A and is settled by a resolver client
///   registered on B; from `conflict.detected` to `conflict.resolved` in B's event stream, beside
///   the round trip of a no-op admin request to B.
/// - throughput: conflicts kept for a resolver, offered in bulk when it registers, answered by a
///   client that pipelines its answers; beside as many `put` requests pipelined on one connection.
/// - replication: a pull in which every document conflicts and is settled on receipt (automatic,
///   or by rules), beside the same pull without conflicts.
/// - store: the write path of that pull alone, in-process (`ResolveStoreWrites`).
struct ResolveBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resolve", abstract: "Conflicts settled by a resolver client and by rules: latency, throughput, replication overhead.")

    enum Phase: String, ExpressibleByArgument, CaseIterable { case latency, throughput, replication, store }

    @Option(help: "Conflicts timed one at a time (latency).") var samples = 500
    @Option(help: "Conflicts offered in bulk to a resolver that pipelines its answers (throughput).") var conflicts = 20_000
    @Option(help: "Documents pulled per replication run (overhead).") var count = 20_000
    @Option(help: "Rounds of the three replication runs (no conflicts, automatic, rules); the median ratio is reported.")
    var rounds = 3
    @Option(parsing: .upToNextOption, help: "Parts to run: latency throughput replication store.") var phases: [Phase] = Phase.allCases
    @OptionGroup var agents: AgentBenchOptions
    @Flag(help: "Print the results as JSON.") var json = false

    func validate() throws {
        guard (1...100_000).contains(samples) else { throw ValidationError("--samples must be 1…100000") }
        guard (1...1_000_000).contains(conflicts), (2...1_000_000).contains(count) else {
            throw ValidationError("--conflicts must be 1…1000000 and --count 2…1000000")
        }
        guard rounds >= 1 else { throw ValidationError("--rounds must be at least 1") }
    }

    func run() throws {
        let directory = agents.temporaryDirectory()
        defer { directory.remove() }
        let setting = ResolveSetting(directory: directory.path, canopyd: try agents.canopydPath(), options: agents)
        var figures: [Figure] = []
        if phases.contains(.latency) { figures += try ResolveLatency(setting: setting, samples: samples).run() }
        if phases.contains(.throughput) { figures += try ResolveThroughput(setting: setting, conflicts: conflicts).run() }
        if phases.contains(.replication) { figures += try ResolveReplication(setting: setting, count: count, rounds: rounds).run() }
        if phases.contains(.store) { figures += try ResolveStoreWrites(directory: directory.path, count: count, rounds: rounds).run() }
        FigureReport.print(figures, json: json)
    }
}

/// Where the parts' agents live, and what they share.
struct ResolveSetting {
    let directory: String
    let canopyd: String
    let options: AgentBenchOptions

    /// The rule that keeps every conflict in a `c:` document for the resolver client `bench`.
    static let resolverRule = "[rule bench]\nprefix = c:\nstrategy = resolver bench\n"
    /// Documents per `import` or `bulk_docs` request (as `canopyctl import` sends them).
    static let requestDocuments = 2_000

    /// A new agent `name` with the `--batch-revisions`/`--batches-in-flight` limits and `config`
    /// appended; not started.
    func agent(_ name: String, config: String = "") throws -> BenchAgent {
        let agent = try BenchAgent(name: name, parent: directory, canopyd: canopyd)
        try agent.setLimits(batchRevisions: options.batchRevisions, batchesInFlight: options.batchesInFlight)
        if !config.isEmpty { try agent.appendConfig(config) }
        return agent
    }

    /// A small body for the resolver parts: document `index` as edited by `side`.
    static func body(_ index: Int, side: String) -> JSONValue {
        .object(["n": .int(Int64(index)), "side": .string(side), "text": .string("a conflict to settle, number \(index)")])
    }

    /// The revision id `body` gets as a new document (generation 1), as every node computes it.
    static func firstRevision(_ body: JSONValue) -> RevisionID {
        RevisionHasher.revisionID(parent: nil, kind: .live, body: body)
    }

    /// Sends `docs` in requests of `requestDocuments` documents (`perDocument` entries each), each
    /// the `command` (`import` or `bulk_docs`) of its part.
    static func send<C: AdminCommand>(
        _ docs: [JSONValue], perDocument: Int = 1, to agent: BenchAgent, as command: ([JSONValue]) -> C
    ) throws {
        let client = try agent.client()
        let step = requestDocuments * perDocument
        for start in stride(from: 0, to: docs.count, by: step) {
            try BenchAgent.checked(client.call(command(Array(docs[start..<min(start + step, docs.count)]))))
        }
    }

    /// `body` as a CouchDB-shaped entry of document `id` (with `_rev` when given).
    static func entry(_ id: String, _ body: JSONValue, rev: RevisionID?) -> JSONValue {
        var members = body.objectValue ?? [:]
        members["_id"] = .string(id)
        if let rev { members["_rev"] = .string(rev.description) }
        return .object(members)
    }
}

/// A resolver client on its own thread, as an application runs one: it registers, then answers
/// every offer as soon as it reads it (`pick` of the first leaf, the current revision) without
/// waiting for the response, and counts the responses. Times are taken when lines are read, on
/// `BenchClock`.
final class BenchResolver: Sendable {
    struct Progress {
        var offers = 0
        var answered = 0
        var refused: [String] = []
        var firstOffer: Double?
        var lastResponse: Double?
    }

    private let client: AdminSocketClient
    private let progress = Mutex(Progress())

    /// Registers `name` on `agent` and starts answering.
    init(_ agent: BenchAgent, name: String) throws {
        client = try agent.client()
        // The response comes before any offer (the agent replies, then offers).
        try BenchAgent.checked(client.call(Admin.RegisterResolver(name: name)))
        Thread { [self] in serve() }.start()
    }

    /// What has been read so far.
    var snapshot: Progress { progress.withLock { $0 } }

    /// Ends the connection; the thread stops at its next read.
    func stop() { client.disconnect() }

    /// Polls until `count` responses came (or one was refused).
    func waitUntilAnswered(_ count: Int) throws -> Progress {
        let deadline = BenchClock.now() + 600
        while BenchClock.now() < deadline {
            let seen = snapshot
            if let refusal = seen.refused.first { throw ValidationError("an answer was refused: \(refusal)") }
            if seen.answered >= count { return seen }
            usleep(500)
        }
        throw ValidationError("the resolver got \(snapshot.answered) of \(count) responses in 600 s")
    }

    private func serve() {
        var nextID: Int64 = 1_000
        while let bytes = try? client.readLine() {
            let read = BenchClock.now()
            let line: AdminLine
            do {
                line = try AdminLine.read(bytes)
            } catch {
                progress.withLock { $0.refused.append("an unreadable line: \(error.message)") }
                continue
            }
            switch line {
            case .offer(let offer):
                progress.withLock {
                    if $0.firstOffer == nil { $0.firstOffer = read }
                    $0.offers += 1
                }
                // An offer names at least one leaf (it does not read otherwise).
                let answer = Admin.AnswerResolver(ticket: offer.ticket, resolution: Admin.Resolution(pick: offer.conflict.leaves[0].revision))
                guard (try? client.sendLine(AdminRequestLine.encode(answer, id: nextID))) != nil else { return }
                nextID += 1
            case .response(_, let members):
                progress.withLock {
                    if AdminResponseLine.isSuccess(members) { $0.answered += 1 } else { $0.refused.append("\(members)") }
                    $0.lastResponse = read
                }
            case .refusal(let failure):
                progress.withLock {
                    $0.refused.append("\(failure)")
                    $0.lastResponse = read
                }
            case .event, .upload, .other:
                continue
            }
        }
    }
}

/// Part 1: a conflict's latency from durable on B to settled by B's resolver client. A and B
/// hold the same first revision of each `c:` document (imported on both) and B its own edit of
/// it; B pulls continuously from A. Each sample edits one document on A.
struct ResolveLatency {
    let setting: ResolveSetting
    let samples: Int
    /// Samples run first and not counted (the first waits for B's connection to A).
    static let warmUp = 20

    func run() throws -> [Figure] {
        let a = try setting.agent("latency-a")
        let b = try setting.agent("latency-b", config: ResolveSetting.resolverRule)
        try a.start()
        try b.start()
        defer { b.stop(); a.stop() }
        let total = samples + Self.warmUp
        let bases = (0..<total).map { ResolveSetting.body($0, side: "base") }
        let baseRevisions = bases.map(ResolveSetting.firstRevision)
        let imported = (0..<total).map { ResolveSetting.entry("c:\($0)", bases[$0], rev: baseRevisions[$0]) }
        try ResolveSetting.send(imported, to: a) { Admin.ImportDocuments(docs: $0) }
        try ResolveSetting.send(imported, to: b) { Admin.ImportDocuments(docs: $0) }
        let edits = (0..<total).map { ResolveSetting.entry("c:\($0)", ResolveSetting.body($0, side: "b"), rev: baseRevisions[$0]) }
        try ResolveSetting.send(edits, to: b) { Admin.BulkDocuments(docs: $0) }

        let resolver = try BenchResolver(b, name: "bench")
        defer { resolver.stop() }
        let events = try b.client()
        try BenchAgent.checked(events.call(Admin.Subscribe()))
        try a.call(Admin.AddPeer(.init(nodeID: b.nodeID, direction: .push, mode: .continuous)))
        try b.call(Admin.AddPeer(.init(nodeID: a.nodeID, address: try a.listenAddress(), direction: .pull, mode: .continuous)))
        let writer = try a.client()
        let probe = try b.client()
        var settled: [Double] = []
        var endToEnd: [Double] = []
        var roundTrips: [Double] = []
        let cpuB = BenchClock.cpuSeconds(pid: b.pid)
        for index in 0..<total {
            let sample = try conflict(index, base: baseRevisions[index], writer: writer, events: events)
            let start = BenchClock.now()
            try BenchAgent.checked(probe.call(Admin.Stats()))
            guard index >= Self.warmUp else { continue }
            roundTrips.append(BenchClock.now() - start)
            settled.append(sample.settled)
            endToEnd.append(sample.endToEnd)
        }
        let cpu = (BenchClock.cpuSeconds(pid: b.pid) - cpuB) / Double(total)
        if let refusal = resolver.snapshot.refused.first { throw ValidationError("an answer was refused: \(refusal)") }
        settled.sort()
        endToEnd.sort()
        roundTrips.sort()
        return [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)].map { label, fraction in
            Figure(
                name: "conflict durable on B → settled by a resolver, \(label)", value: BenchClock.percentile(settled, fraction) * 1000,
                unit: "ms", ceiling: BenchClock.percentile(roundTrips, fraction) * 1000, ceilingName: "admin round trip to B",
                note: String(format: "put on A → settled on B %.2f ms", BenchClock.percentile(endToEnd, fraction) * 1000)
                    + (label == "p50" ? String(format: "; %d samples; CPU of B %.2f ms per conflict", samples, cpu * 1000) : ""))
        }
    }

    /// Edits `c:INDEX` on A and reads B's events until B's resolver settled the conflict: the
    /// seconds from `conflict.detected` to `conflict.resolved`, and from the put on A.
    private func conflict(_ index: Int, base: RevisionID, writer: AdminSocketClient, events: AdminSocketClient) throws
        -> (settled: Double, endToEnd: Double)
    {
        let id = "c:\(index)"
        let start = BenchClock.now()
        try BenchAgent.checked(writer.call(Admin.PutDocument(doc: id, body: ResolveSetting.body(index, side: "a"), rev: base)))
        var detected: Double?
        while true {
            guard BenchClock.now() - start < BenchAgent.stopWaitSeconds else { throw ValidationError("\(id) was not settled on B") }
            let bytes = try events.readLine()
            let read = BenchClock.now()
            guard case .event(let event) = try AdminLine.read(bytes), let document = event.document, document.doc == id else { continue }
            switch document.kind {
            case .conflictDetected:
                detected = read
            case .conflictResolved:
                guard let detected, document.by == "bench" else { throw ValidationError("\(id) settled otherwise: \(event.data)") }
                return (read - detected, read - start)
            case .resolutionFailed:
                throw ValidationError("\(id): \(event.data)")
            default:
                continue
            }
        }
    }
}

/// Part 2: conflicts offered in bulk to a resolver that pipelines its answers. Each document is
/// imported as two generation-1 revisions while no resolver is connected (the rule keeps them
/// for `bench`); the resolver then registers and every kept conflict is offered, at most 4096 at
/// a time. The ceiling is as many `put`s of bodies of the same size, pipelined on one connection,
/// in the same agent just before.
struct ResolveThroughput {
    let setting: ResolveSetting
    let conflicts: Int

    func run() throws -> [Figure] {
        let agent = try setting.agent("throughput", config: ResolveSetting.resolverRule)
        try agent.start()
        defer { agent.stop() }
        let leaves = (0..<conflicts).flatMap { index in
            ["a", "b"].map { side in
                let body = ResolveSetting.body(index, side: side)
                return ResolveSetting.entry("c:\(index)", body, rev: ResolveSetting.firstRevision(body))
            }
        }
        try ResolveSetting.send(leaves, perDocument: 2, to: agent) { Admin.ImportDocuments(docs: $0) }
        let kept = try agent.call(Admin.Status()).conflictsAwaitingResolver
        guard kept == Int64(conflicts) else { throw ValidationError("\(kept) conflicts kept, not \(conflicts)") }

        let ceiling = try pipelinedPuts(agent)
        let cpuBefore = BenchClock.cpuSeconds(pid: agent.pid)
        let registered = BenchClock.now()
        let resolver = try BenchResolver(agent, name: "bench")
        defer { resolver.stop() }
        let progress = try resolver.waitUntilAnswered(conflicts)
        let cpu = BenchClock.cpuSeconds(pid: agent.pid) - cpuBefore
        guard let first = progress.firstOffer, let last = progress.lastResponse else { throw ValidationError("no offers") }
        let left = try agent.call(Admin.Stats()).counts.conflictedCount
        guard left == 0 else { throw ValidationError("\(left) conflicts left after the resolver answered") }
        let ceilingRate = Double(conflicts) / ceiling.wall
        return [
            Figure(name: "pipelined puts on one connection (ceiling)", value: ceilingRate, unit: "docs/s",
                   note: String(format: "%.3f s; CPU of the agent %.1f µs per put", ceiling.wall, ceiling.cpu / Double(conflicts) * 1e6)),
            Figure(name: "conflicts settled by a pipelining resolver", value: Double(conflicts) / (last - first), unit: "conflicts/s",
                   ceiling: ceilingRate, ceilingName: "pipelined puts",
                   note: String(format: "%d conflicts, first offer → last response %.3f s; registration → first offer %.1f ms; CPU of the agent %.1f µs per conflict",
                                conflicts, last - first, (first - registered) * 1000, cpu / Double(conflicts) * 1e6)),
        ]
    }

    /// `conflicts` puts of new documents, every request sent before the responses are read (the
    /// agent answers each in order); from the first send to the last response.
    private func pipelinedPuts(_ agent: BenchAgent) throws -> (wall: Double, cpu: Double) {
        let client = try agent.client()
        let lines = (0..<conflicts).map { index in
            AdminRequestLine.encode(Admin.PutDocument(doc: "p:\(index)", body: ResolveSetting.body(index, side: "a")), id: Int64(index))
        }
        let cpuBefore = BenchClock.cpuSeconds(pid: agent.pid)
        let start = BenchClock.now()
        for line in lines { try client.sendLine(line) }
        for _ in 0..<conflicts {
            let response = try client.readObject()
            guard AdminResponseLine.isSuccess(response) else { throw ValidationError("put failed: \(response)") }
        }
        return (BenchClock.now() - start, BenchClock.cpuSeconds(pid: agent.pid) - cpuBefore)
    }
}

/// Part 3: what settling conflicts on receipt costs a pull. A holds `count` documents, each its
/// first revision and an edit; B starts from the same first revisions (written with the library,
/// so the revision ids match) and pulls once. In the conflict runs B also holds its own edit of
/// every document, so each of A's edits makes a conflict, settled in the batch's transaction; in
/// the ceiling run B holds the first revisions alone, so it receives the same revisions, checks
/// and stores them as extensions of what it holds. Half the documents are notes (`type` note),
/// half settings (ids `set-…`).
struct ResolveReplication {
    let setting: ResolveSetting
    let count: Int
    let rounds: Int

    /// What B holds and how it settles conflicts.
    enum Setup: String, CaseIterable {
        case noConflicts = "no conflicts"
        case automatic = "every document conflicts, conflicts = automatic"
        case rules = "every document conflicts, rules local-wins (by type) + remote-wins (by prefix)"
        case merging = "every document conflicts, rules merge-json (by type) + remote-wins (by prefix)"

        /// The strategy notes get under the setup's rules.
        var notes: String? {
            switch self {
            case .rules: "local-wins"
            case .merging: "merge-json"
            default: nil
            }
        }

        var config: String {
            guard let notes else { return "" }
            return "[rule notes]\nvalue = note\nstrategy = \(notes)\n\n[rule settings]\nprefix = set-\nstrategy = remote-wins\n"
        }
    }

    private struct Pull {
        let wall: Double
        let cpuB: Double
        /// A's CPU over the same interval: with B's, how much of the machine the pull used.
        let cpuA: Double

        /// The cores A and B used together over the pull.
        var cores: Double { (cpuA + cpuB) / wall }
    }

    func run() throws -> [Figure] {
        let a = try setting.agent("replicate-a")
        try load(a, edit: "A")
        try a.start()
        defer { a.stop() }
        var pulls: [Setup: [Pull]] = [:]
        for round in 0..<rounds {
            // The order turns each round, so no setup always runs first.
            let order = Setup.allCases.indices.map { Setup.allCases[($0 + round) % Setup.allCases.count] }
            for setup in order { pulls[setup, default: []].append(try pull(setup, round: round, from: a)) }
        }
        let ceilings = pulls[.noConflicts]!.map { Double(count) / $0.wall }
        var figures = [Figure(
            name: "pull of \(count) edits, no conflicts (ceiling)", value: ceilings.sorted()[(rounds - 1) / 2], unit: "docs/s",
            note: "median; all: " + ceilings.map { String(format: "%.0f", $0) }.joined(separator: " / "))]
        for setup in [Setup.automatic, .rules, .merging] {
            let ratios = (0..<rounds).map { pulls[.noConflicts]![$0].wall / pulls[setup]![$0].wall }
            let median = (0..<rounds).sorted { ratios[$0] < ratios[$1] }[(rounds - 1) / 2]
            let run = pulls[setup]![median]
            let ceiling = pulls[.noConflicts]![median]
            figures.append(Figure(
                name: "pull of \(count) edits, \(setup.rawValue)", value: Double(count) / run.wall, unit: "docs/s", ceiling: ceilings[median],
                ceilingName: "no conflicts, same round",
                note: String(format: "overhead %.1f%%; rounds: ", 100 * (1 - ratios[median]))
                    + ratios.map { String(format: "%.0f%%", 100 * $0) }.joined(separator: " / ")
                    + String(format: "; CPU of B %.1f µs per document (no conflicts %.1f)", run.cpuB / Double(count) * 1e6,
                             ceiling.cpuB / Double(count) * 1e6)
                    + String(format: "; A and B used %.2f cores (no conflicts %.2f)", run.cores, ceiling.cores)))
        }
        return figures
    }

    /// Document `index`'s id and first revision's body (about 1 KiB).
    static func document(_ index: Int) -> (id: String, body: [String: JSONValue]) {
        let note = index % 2 == 0
        return (note ? "note-\(index)" : "set-\(index)", [
            "type": .string(note ? "note" : "setting"), "index": .int(Int64(index)), "title": .string("Document number \(index)"),
            "owner": .string("user\(index % 1000)"), "text": .string(String(repeating: "lorem ipsum dolor sit amet ", count: 34)),
        ])
    }

    /// Each node's edit: A changes `title`, B `owner`, so a three-way merge keeps both.
    static func edited(_ body: [String: JSONValue], by node: String) -> JSONValue {
        .object(body.merging(node == "A" ? ["title": .string("edited on A")] : ["owner": .string("edited on B")]) { $1 })
    }

    /// Writes the first revisions, and `edit`'s edit of each when given, into the agent's
    /// database with the library (the agent is not running).
    private func load(_ agent: BenchAgent, edit: String?) throws {
        let store = try DocumentStore(path: agent.databasePath)
        for start in stride(from: 0, to: count, by: 1_000) {
            let documents = (start..<min(start + 1_000, count)).map(Self.document)
            let bases = try store.putBatch(documents.map { LocalWrite(documentID: $0.id, body: .object($0.body), replacing: nil) })
            guard let edit else { continue }
            _ = try store.putBatch(zip(documents, bases).map { LocalWrite(documentID: $0.id, body: Self.edited($0.body, by: edit), replacing: $1) })
        }
    }

    /// A new B set up for `setup` pulls everything from A once; timed from the `peer.add` that
    /// makes it dial A to the end of `sync --wait`. Checks that B holds every document with no
    /// conflict left, and what the rules made of a note and a setting.
    private func pull(_ setup: Setup, round: Int, from a: BenchAgent) throws -> Pull {
        let b = try setting.agent("replicate-b\(round)-\(Setup.allCases.firstIndex(of: setup)!)", config: setup.config)
        try load(b, edit: setup == .noConflicts ? nil : "B")
        try b.start()
        defer {
            b.stop()
            try? FileManager.default.removeItem(atPath: b.dataDir)
        }
        try a.call(Admin.AddPeer(.init(nodeID: b.nodeID, direction: .push, mode: .continuous)))
        defer { _ = try? a.call(Admin.RemovePeer(nodeID: b.nodeID)) }
        let client = try b.client()
        let address = try a.listenAddress()
        let cpuB = BenchClock.cpuSeconds(pid: b.pid)
        let cpuA = BenchClock.cpuSeconds(pid: a.pid)
        let start = BenchClock.now()
        try b.pullOnce(from: a, address: address, on: client)
        let pull = Pull(
            wall: BenchClock.now() - start, cpuB: BenchClock.cpuSeconds(pid: b.pid) - cpuB,
            cpuA: BenchClock.cpuSeconds(pid: a.pid) - cpuA)
        let counts = try BenchAgent.checked(client.call(Admin.Stats())).counts
        guard counts.docCount == Int64(count), counts.conflictedCount == 0 else {
            throw ValidationError("\(setup.rawValue): B holds \(counts.docCount) documents, \(counts.conflictedCount) conflicted")
        }
        if setup.notes != nil { try checkRules(client, merged: setup == .merging) }
        return pull
    }

    /// A note merged both edits (merge-json) or kept B's (local-wins); a setting took A's (remote-wins).
    private func checkRules(_ client: AdminSocketClient, merged: Bool) throws {
        for index in [0, 1] {
            let (id, _) = Self.document(index)
            let body = try BenchAgent.checked(client.call(Admin.GetDocument(doc: id))).doc.objectValue ?? [:]
            let owner: JSONValue = index == 0 ? .string("edited on B") : .string("user\(index % 1000)")
            let title: JSONValue = index == 0 && !merged ? .string("Document number 0") : .string("edited on A")
            guard body["title"] == title, body["owner"] == owner else {
                throw ValidationError("\(id) under the rules: \(body)")
            }
        }
    }
}
