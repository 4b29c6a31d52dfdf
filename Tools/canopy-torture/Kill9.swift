import ArgumentParser
import CanopyAdmin
import CanopyCore
import Foundation

/// `kill9`: two agents replicating continuously both ways while a client writes to each; one of
/// them is killed with SIGKILL at seeded-random moments and restarted at once, `--kills` times.
/// Every acknowledged write must end up on both agents.
struct Kill9: Experiment {
    static let configuration = CommandConfiguration(
        commandName: "kill9", abstract: "kill -9 agents under two-way writes; count acknowledged writes lost.")

    @OptionGroup var common: CommonOptions
    @Option(help: "How many kills (default 30; 3 with --quick).") var kills: Int?
    @Option(help: "Which agent dies: a, b or alternate.") var victim = "alternate"
    @Option(help: "Longest time between two kills, in seconds (the shortest is a tenth of it).") var maxGap: Double?

    func validate() throws {
        guard ["a", "b", "alternate"].contains(victim) else { throw ValidationError("--victim must be a, b or alternate") }
        if let kills, !(1...10_000).contains(kills) { throw ValidationError("--kills must be 1…10000") }
        if let maxGap, !(0.05...600).contains(maxGap) { throw ValidationError("--max-gap must be 0.05…600") }
    }

    func experiment() throws -> ExperimentResult {
        let count = kills ?? (common.quick ? 3 : 30)
        let gap = maxGap ?? (common.quick ? 0.8 : 2.0)
        let binaries = try common.binaries()
        let directory = try makeTemporaryDirectory("canopy-kill9")
        let (a, b) = try TortureAgent.replicatingPair(in: directory, binaries: binaries)
        defer {
            b.stop()
            a.stop()
        }

        let ledger = WriteLedger()
        let writers = [
            Writer(agent: a, prefix: "a", ledger: ledger, seed: common.seed &* 2 &+ 1),
            Writer(agent: b, prefix: "b", ledger: ledger, seed: common.seed &* 2 &+ 2),
        ]
        writers.forEach { $0.start() }
        var writersRunning = true
        defer { if writersRunning { writers.forEach { $0.stop() } } }

        var random = SplitMix64(seed: common.seed)
        var lastRestart = 0.0
        var slowestStart = 0.0
        for index in 0..<count {
            pause(gap / 10 + Double(random.next(below: 1000)) / 1000 * gap * 0.9)
            let agent: TortureAgent
            switch victim {
            case "a": agent = a
            case "b": agent = b
            default: agent = index % 2 == 0 ? a : b
            }
            common.progress(
                "kill \(index + 1)/\(count): kill -9 \(agent.name) after \(ledger.counts.acknowledged) acknowledged writes")
            agent.kill9()
            if index == count - 1 {
                // The last kill: the writers stop before the restart, so convergence has a fixed end.
                writers.forEach { $0.stop() }
                writersRunning = false
            }
            let launched = now()
            lastRestart = launched
            if case .exited(let status) = try agent.start() {
                throw ExperimentFailure("\(agent.name) did not come back after kill -9 (exit \(status)): \(agent.logTail())")
            }
            slowestStart = max(slowestStart, now() - launched)
        }

        common.progress("waiting for both agents to hold every acknowledged write")
        let (acknowledged, _) = ledger.snapshot
        let convergenceLimit = 300.0
        var lastFull = 0.0
        let converged = try waitUntil(limit: convergenceLimit, interval: 0.01) {
            // Cheap first: each agent's peer confirmed every change it has; then the full comparison
            // (also every 2 s regardless, should the peer tables never say so).
            let confirmed = Self.peerConfirmedAll(a, b) && Self.peerConfirmedAll(b, a)
            guard confirmed || now() - lastFull > 2 else { return false }
            lastFull = now()
            let onA = try Documents.currentRevisions(a)
            guard acknowledged.keys.allSatisfy({ onA[$0] != nil }) else { return false }
            return try Documents.currentRevisions(b) == onA
        }
        let convergence = now() - lastRestart
        let check = try LedgerCheck.check(ledger, on: [a, b])
        let sound = try a.checkSound() && b.checkSound()
        let conflicts = try [a, b].map { Int(try $0.call(Admin.Stats()).counts.conflictedCount) }.reduce(0, +)
        let counts = ledger.counts

        var result = ExperimentResult(
            name: "kill9",
            summary: "\(count) kill -9 of \(victim == "alternate" ? "a and b in turn" : victim) while clients wrote to both")
        result.figures = [
            .count("kills", "kills", count),
            .count("acknowledged_writes", "acknowledged writes", counts.acknowledged),
            .count("unanswered_writes", "writes in flight at a kill (outcome unknown)", counts.unanswered),
            .count("refused_writes", "writes refused by the agent", ledger.refusedWrites.count, target: .equal(0)),
            .count("lost_acknowledged_writes", "lost acknowledged writes", check.lost, target: .equal(0)),
            .flag("converged", "converged", converged, required: true),
            .seconds("convergence_seconds", "convergence after the last restart", convergence),
            .seconds("slowest_restart_seconds", "slowest restart until serving", slowestStart),
            .count("conflicts", "conflicted documents (both agents)", conflicts, target: .equal(0)),
            .flag("integrity_sound", "integrity (check sound on both)", sound, required: true),
        ]
        result.notes = check.examples.map { "lost: \($0)" } + ledger.refusedWrites.prefix(3).map { "refused: \($0)" }
        if !converged { result.notes.append("not converged after \(Int(convergenceLimit)) s; logs in \(directory)") }
        return result
    }

    /// `agent`'s row for `peer` shows every change of `agent` confirmed (nothing pending, pushed
    /// through its update sequence).
    static func peerConfirmedAll(_ agent: TortureAgent, _ peer: TortureAgent) -> Bool {
        guard let client = try? agent.client(timeout: 30), let status = try? agent.call(Admin.Status(), on: client),
            let row = try? agent.peerRow(peer.nodeID, client: client)
        else { return false }
        return row.pending == 0 && row.lastPushedSeq == status.counts.updateSeq
    }
}
