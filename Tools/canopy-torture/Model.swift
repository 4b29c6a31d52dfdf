import ArgumentParser
import CanopyAdmin
import CanopyAgent
import CanopyCore
import Foundation

/// `model`: a seeded random walk of operations over three real agents that replicate
/// continuously with each other, checked against a model of what each operation must do.
///
/// The operations: new documents, updates and deletions on any running agent (through its admin
/// socket, the revision read back first); `kill -9` (restarted at once or left down for a while)
/// and clean restarts; partitions made and healed with `unshare` / `share` of `default` on one
/// or both sides; and `canopyctl sync --wait` between two running agents, whose answer must be
/// what the model says: exit 0 when both share `default` with each other, 1 naming `default` when
/// only the asking agent shares it (the peer does not share it back), 4 when the asking agent
/// shares nothing with the peer. At the end every agent runs, every partition is healed, and the
/// agents must converge: the same current revision of every document on all three, every
/// acknowledged revision still readable on each (`get` with `rev`: a conflict's loser stays in
/// the tree), no conflicted document left (the default policy settles them), each agent sound.
struct Model: Experiment {
    static let configuration = CommandConfiguration(
        commandName: "model", abstract: "Random operations, partitions and kills over three agents, checked against a model.")

    @OptionGroup var common: CommonOptions
    @Option(help: "How many operations (default 300; 40 with --quick).") var steps: Int?
    @Flag(help: "Every operation an attach, and no faults: attachment content named by many documents, fetched between three agents.")
    var attachmentsOnly = false

    func validate() throws {
        if let steps, !(1...100_000).contains(steps) { throw ValidationError("--steps must be 1…100000") }
    }

    func experiment() throws -> ExperimentResult {
        let count = steps ?? (common.quick ? 40 : 300)
        let binaries = try common.binaries()
        let directory = try makeTemporaryDirectory("canopy-model")
        let agents = try ["a", "b", "c"].map { name in
            try TortureAgent(name: name, dataDir: directory + "/" + name, logDirectory: directory, binaries: binaries)
        }
        defer { for agent in agents { agent.stop() } }
        for agent in agents { try agent.startServing() }
        for agent in agents {
            for other in agents where other !== agent { try agent.allow(other) }
        }
        var walk = ModelWalk(agents: agents, random: SplitMix64(seed: common.seed), contents: try ModelWalk.writeContents(in: directory, seed: common.seed))
        walk.attachmentsOnly = attachmentsOnly
        for step in 0..<count {
            let done = try walk.step()
            if step % 20 == 0 { common.progress("step \(step + 1)/\(count): \(done)") }
        }
        common.progress("healing every partition and waiting for the three agents to converge")
        let (converged, seconds) = try walk.healAndConverge()
        let lost = try walk.lostRevisions()
        let conflicts = try agents.map { Int(try $0.call(Admin.Stats()).counts.conflictedCount) }.reduce(0, +)
        let sound = try agents.allSatisfy { try $0.checkSound() }
        // Converged means every revision is in place; a revision still set aside for content
        // then waits for nothing, and is given 30 s to be merged before it counts as stuck.
        var fetching = 0
        _ = try waitUntil(limit: 30, interval: 0.2) {
            fetching = try agents.map { Int(try $0.call(Admin.Status()).counts.awaitingAttachments) }.reduce(0, +)
            return fetching == 0
        }

        var result = ExperimentResult(
            name: "model", summary: "\(count) random operations over three agents, seed \(common.seed)")
        result.figures = [
            .count("operations", "operations", count),
            .count("acknowledged_writes", "acknowledged writes", walk.acknowledged.count),
            .count("attachments", "attachments written", walk.attachments),
            .count("kills", "kill -9", walk.kills),
            .count("partitions", "shares taken away (unshare)", walk.unshares),
            .count("syncs", "sync --wait checked against the model", walk.syncs),
            .count("sync_mismatches", "sync answers that disagree with the model", walk.mismatches.count, target: .equal(0)),
            .count("refused_writes", "writes refused by the agent", walk.refused.count, target: .equal(0)),
            .count("lost_acknowledged_writes", "acknowledged revisions missing at the end", lost.count, target: .equal(0)),
            .flag("converged", "converged", converged, required: true),
            .seconds("convergence_seconds", "convergence after healing", seconds),
            .count("conflicts", "conflicted documents left (all agents)", conflicts, target: .equal(0)),
            .count("awaiting_attachments", "revisions still waiting for attachment content (all agents)", fetching, target: .equal(0)),
            .flag("integrity_sound", "integrity (check sound on all)", sound, required: true),
        ]
        result.notes = walk.mismatches.prefix(5).map { "sync: \($0)" } + walk.refused.prefix(3).map { "refused: \($0)" }
            + lost.prefix(5).map { "lost: \($0)" }
        if !converged { result.notes.append("not converged; logs in \(directory)") }
        return result
    }
}

/// The model and the walk over it: which agents run, who shares `default` with whom, and every
/// write an agent acknowledged. Operations are chosen by the seeded generator only, so a seed
/// replays the same walk (the agents' own timing may still differ between runs).
struct ModelWalk {
    let agents: [TortureAgent]
    var random: SplitMix64
    /// `running[i]`: agent i serves.
    var running: [Bool]
    /// `shares[i][j]`: agent i shares `default` with agent j (read-write).
    var shares: [[Bool]]
    /// Every acknowledged write: the document, its revision and the agent that took it.
    private(set) var acknowledged: [(doc: String, rev: String, agent: String)] = []
    /// Documents written so far, in order (updates and deletions pick among them).
    private var documents: [String] = []
    /// Files whose content `attach` uses, each named by many documents (content stored once).
    let contents: [String]
    private(set) var attachments = 0
    /// Every step is an attach (`--attachments-only`).
    var attachmentsOnly = false
    private(set) var kills = 0
    private(set) var unshares = 0
    private(set) var syncs = 0
    private(set) var mismatches: [String] = []
    private(set) var refused: [String] = []

    init(agents: [TortureAgent], random: SplitMix64, contents: [String]) {
        self.agents = agents
        self.random = random
        self.contents = contents
        running = agents.map { _ in true }
        shares = agents.map { _ in agents.map { _ in true } }
    }

    /// One operation, chosen at random among those that apply; returns what it did.
    mutating func step() throws -> String {
        let roll = random.next(below: 100)
        let up = running.indices.filter { running[$0] }
        guard let some = up.isEmpty ? nil : up[Int(random.next(below: UInt64(up.count)))] else { return try start(0) }
        if attachmentsOnly { return try attach(on: some) }
        switch roll {
        case 0..<29: return try write(on: some, id: "doc-\(documents.count)")
        case 29..<35: return try attach(on: some)
        case 35..<55: return try update(on: some, delete: false)
        case 55..<60: return try update(on: some, delete: true)
        case 60..<66: return kill(some, restart: random.next(below: 2) == 0)
        case 66..<70: return try start(Int(random.next(below: UInt64(agents.count))))
        case 70..<73: return try cleanRestart(some)
        case 73..<84: return try changeShare()
        default: return try sync(from: some)
        }
    }

    private mutating func write(on index: Int, id: String) throws -> String {
        let agent = agents[index]
        let answer = try agent.client().call(Admin.PutDocument(doc: id, body: .object(["n": .int(Int64(acknowledged.count))]))).map(\.reply)
        guard case .success(let written) = answer, let rev = written.rev else {
            refused.append("put \(id) on \(agent.name): \(Self.said(answer))")
            return "put \(id) refused"
        }
        acknowledged.append((id, rev.description, agent.name))
        documents.append(id)
        return "put \(id) on \(agent.name)"
    }

    /// Updates or deletes a document this agent holds, at the revision it reads first.
    private mutating func update(on index: Int, delete: Bool) throws -> String {
        guard !documents.isEmpty else { return try write(on: index, id: "doc-0") }
        let agent = agents[index]
        let id = documents[Int(random.next(below: UInt64(documents.count)))]
        let client = try agent.client()
        guard let current = try Self.liveRevision(id, on: client) else { return "\(id) is not live on \(agent.name)" }
        let answer = delete
            ? try client.call(Admin.DeleteDocument(doc: id, rev: current)).map(\.reply)
            : try client.call(Admin.PutDocument(doc: id, body: .object(["n": .int(Int64(acknowledged.count))]), rev: current)).map(\.reply)
        guard case .success(let written) = answer, let rev = written.rev else {
            // A replicated revision may have arrived between the read and the write: a conflict
            // answer is the agent doing its job, not a refusal.
            if case .failure(let failure) = answer, failure.code == .conflict { return "\(id) moved on \(agent.name)" }
            refused.append("\(delete ? "delete" : "put") \(id) on \(agent.name): \(Self.said(answer))")
            return "write of \(id) refused"
        }
        acknowledged.append((id, rev.description, agent.name))
        return "\(delete ? "deleted" : "updated") \(id) on \(agent.name)"
    }

    /// Four files of 5 B, 10 KiB, 300 KiB (more than one 256 KiB part) and 1 MiB, from the seed.
    static func writeContents(in directory: String, seed: UInt64) throws -> [String] {
        var random = SplitMix64(seed: seed &+ 0x5eed)
        return try [5, 10 << 10, 300 << 10, 1 << 20].enumerated().map { index, size in
            let path = directory + "/content-\(index).bin"
            let bytes = (0..<size).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            return path
        }
    }

    /// `canopyctl attach` of one of the contents, to a new document or to a live one at the
    /// revision read first.
    private mutating func attach(on index: Int) throws -> String {
        let agent = agents[index]
        let content = contents[Int(random.next(below: UInt64(contents.count)))]
        var id = "att-\(attachments)"
        var arguments = ["attach", id, "file", "--file", content]
        if !documents.isEmpty && random.next(below: 2) == 0 {
            let existing = documents[Int(random.next(below: UInt64(documents.count)))]
            if let current = try Self.liveRevision(existing, on: agent.client()) {
                id = existing
                arguments = ["attach", id, "file", "--file", content, "--rev", current.description]
            }
        }
        let result = try agent.ctl(arguments, limit: 120)
        guard result.status == 0, let rev = result.stdout.split(separator: " ").first(where: { $0.contains("-") && $0.first?.isNumber == true }) else {
            if result.status == 3 { return "\(id) moved on \(agent.name)" }
            refused.append("attach \(id) on \(agent.name): exit \(result.status): \(result.stderr.prefix(200))")
            return "attach of \(id) refused"
        }
        attachments += 1
        acknowledged.append((id, String(rev), agent.name))
        if !documents.contains(id) { documents.append(id) }
        return "attached to \(id) on \(agent.name)"
    }

    /// The current revision of `id` on `client`'s agent; nil when it has none or it is a deletion.
    private static func liveRevision(_ id: String, on client: AdminSocketClient) throws -> RevisionID? {
        guard case .success(let got) = try client.call(Admin.GetDocument(doc: id)), !got.reply.deleted else { return nil }
        return got.reply.revision
    }

    /// What the agent answered a write, for a refusal's note: its error, or the reply.
    private static func said<Reply>(_ answer: Result<Reply, AdminFailure>) -> String {
        switch answer {
        case .success(let reply): "\(reply)"
        case .failure(let failure): "\(failure)"
        }
    }

    private mutating func kill(_ index: Int, restart: Bool) -> String {
        agents[index].kill9()
        kills += 1
        running[index] = false
        guard restart else { return "kill -9 \(agents[index].name), left down" }
        return (try? start(index)) ?? "kill -9 \(agents[index].name); it did not come back"
    }

    private mutating func start(_ index: Int) throws -> String {
        guard !running[index] else { return "\(agents[index].name) already runs" }
        if case .exited(let status) = try agents[index].start() {
            throw ExperimentFailure("\(agents[index].name) did not start (exit \(status)): \(agents[index].logTail())")
        }
        running[index] = true
        return "started \(agents[index].name)"
    }

    private mutating func cleanRestart(_ index: Int) throws -> String {
        agents[index].stop()
        running[index] = false
        return try start(index)
    }

    /// Takes a share away or gives it back, between two running agents, on one side or both.
    private mutating func changeShare() throws -> String {
        let up = running.indices.filter { running[$0] }
        guard up.count >= 2 else { return "too few agents run to change a share" }
        let i = up[Int(random.next(below: UInt64(up.count)))]
        let others = up.filter { $0 != i }
        let j = others[Int(random.next(below: UInt64(others.count)))]
        let share = !shares[i][j]
        try setShare(i, j, share)
        let both = random.next(below: 2) == 0
        if both && shares[j][i] != share { try setShare(j, i, share) }
        return "\(agents[i].name)\(both ? " and \(agents[j].name)" : "") \(share ? "share" : "unshare") default"
    }

    private mutating func setShare(_ i: Int, _ j: Int, _ share: Bool) throws {
        if share {
            try agents[i].call(Admin.ShareDatabase(db: "default", nodeID: agents[j].nodeID, access: .readWrite))
        } else {
            try agents[i].call(Admin.UnshareDatabase(db: "default", nodeID: agents[j].nodeID))
        }
        shares[i][j] = share
        if !share { unshares += 1 }
    }

    /// `canopyctl sync PEER --wait` from a running agent to another running one; its exit status
    /// and message must be the model's.
    private mutating func sync(from i: Int) throws -> String {
        let others = running.indices.filter { running[$0] && $0 != i }
        guard !others.isEmpty else { return "no running peer to sync with" }
        let j = others[Int(random.next(below: UInt64(others.count)))]
        let result = try agents[i].ctl(["sync", agents[j].nodeID, "--wait", "--timeout", "30"], limit: 60)
        syncs += 1
        let expected: (status: Int32, says: String?)
        if !shares[i][j] {
            expected = (4, "nothing to sync")
        } else if !shares[j][i] {
            expected = (1, "does not share default with this node")
        } else {
            expected = (0, nil)
        }
        let said = result.stdout + result.stderr
        if result.status != expected.status || !(expected.says.map(said.contains) ?? true) {
            mismatches.append("\(agents[i].name) → \(agents[j].name): exit \(result.status), expected \(expected.status)"
                + " (shares \(shares[i][j])/\(shares[j][i])): \(said.replacingOccurrences(of: "\n", with: " | ").suffix(400))")
        }
        return "\(agents[i].name) synced with \(agents[j].name): exit \(result.status)"
    }

    /// Starts every agent, shares `default` everywhere again, and waits (at most 300 s) until all
    /// three hold the same current revisions, every acknowledged document included.
    mutating func healAndConverge() throws -> (converged: Bool, seconds: Double) {
        for index in agents.indices where !running[index] { _ = try start(index) }
        for i in agents.indices {
            for j in agents.indices where i != j && !shares[i][j] { try setShare(i, j, true) }
        }
        let healed = now()
        let documents = Set(acknowledged.map(\.doc))
        var lastCheck = 0.0
        let converged = try waitUntil(limit: 300, interval: 0.05) {
            guard now() - lastCheck > 0.5 else { return false }
            lastCheck = now()
            let views = try agents.map(Documents.currentRevisions)
            return documents.allSatisfy { views[0][$0] != nil } && views.dropFirst().allSatisfy { $0 == views[0] }
        }
        return (converged, now() - healed)
    }

    /// Acknowledged revisions that some agent does not hold in its document's revision tree: in
    /// the history of none of the leaves it exports (open or closed). Ancestors' bodies need not
    /// travel, so a revision id in a history is a revision kept.
    func lostRevisions() throws -> [String] {
        var lost: [String] = []
        for agent in agents {
            let leaves = Dictionary(grouping: try Documents.leaves(agent)) { leaf -> String in
                if case .string(let id)? = leaf["_id"] { return id }
                return ""
            }
            for write in acknowledged where !(leaves[write.doc] ?? []).contains(where: { Documents.history($0, contains: write.rev) }) {
                lost.append("\(write.doc) \(write.rev) (written on \(write.agent)) on \(agent.name)")
            }
        }
        return lost
    }
}
