import ArgumentParser
import CanopyCore
import CanopyStore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The write path alone of the replication figure: the same edits of A, checked first (as a
/// pull checks a batch off the write queue), then written in-process with
/// `bulkInsertForeign(checked:)` in batches of 500 (the agent's `batch-revisions`), into a store
/// that holds B's edit of every document (each setup's policy settles the conflicts) or only
/// the first revisions (the ceiling), checkpointed in the background as the agent's stores are.
/// Timed in thread CPU seconds of the writes only: no network, peer or scheduler, so the figure
/// moves only with the write path's own cost.
struct ResolveStoreWrites {
    let directory: String
    let count: Int
    let rounds: Int

    func run() throws -> [Figure] {
        var cpu: [ResolveReplication.Setup: [Double]] = [:]
        for round in 0..<rounds {
            let setups = ResolveReplication.Setup.allCases
            for offset in setups.indices {
                let setup = setups[(offset + round) % setups.count]
                cpu[setup, default: []].append(try write(setup, round: round))
            }
        }
        let ceilings = cpu[.noConflicts]!.map { Double(count) / $0 }
        var figures = [Figure(
            name: "store write of \(count) edits, no conflicts (ceiling)", value: ceilings.sorted()[(rounds - 1) / 2], unit: "docs/s",
            note: "CPU time of the writes; median; all: " + ceilings.map { String(format: "%.0f", $0) }.joined(separator: " / "))]
        for setup in [ResolveReplication.Setup.automatic, .rules, .merging] {
            let ratios = (0..<rounds).map { cpu[.noConflicts]![$0] / cpu[setup]![$0] }
            let median = (0..<rounds).sorted { ratios[$0] < ratios[$1] }[(rounds - 1) / 2]
            figures.append(Figure(
                name: "store write of \(count) edits, \(setup.rawValue)", value: Double(count) / cpu[setup]![median], unit: "docs/s",
                ceiling: ceilings[median], ceilingName: "no conflicts, same round",
                note: String(format: "%.1f µs per document more (%.1f against %.1f); rounds: ",
                             (cpu[setup]![median] - cpu[.noConflicts]![median]) / Double(count) * 1e6,
                             cpu[setup]![median] / Double(count) * 1e6, cpu[.noConflicts]![median] / Double(count) * 1e6)
                    + ratios.map { String(format: "%.0f%%", 100 * $0) }.joined(separator: " / ")))
        }
        return figures
    }

    /// One store set up as `setup` receives A's edits; returns the thread CPU seconds of the writes.
    private func write(_ setup: ResolveReplication.Setup, round: Int) throws -> Double {
        let path = "\(directory)/store-\(round)-\(ResolveReplication.Setup.allCases.firstIndex(of: setup)!).sqlite"
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        // Checkpoints in the background, as the agent's stores do: an inline one would charge the
        // writes with copying the WAL into the database, about a sixth of their time.
        let store = try DocumentStore(path: path, configuration: DocumentStore.Configuration(
            conflictPolicy: policy(setup), checkpointInBackground: true))
        var edits: [ForeignRevision] = []
        for start in stride(from: 0, to: count, by: 1_000) {
            let documents = (start..<min(start + 1_000, count)).map(ResolveReplication.document)
            let bases = try store.putBatch(documents.map { LocalWrite(documentID: $0.id, body: .object($0.body), replacing: nil) })
            if setup != .noConflicts {
                _ = try store.putBatch(zip(documents, bases).map {
                    LocalWrite(documentID: $0.id, body: ResolveReplication.edited($0.body, by: "B"), replacing: $1)
                })
            }
            for (document, base) in zip(documents, bases) {
                let body = CanonicalJSON.encode(ResolveReplication.edited(document.body, by: "A"))
                let leaf = RevisionHasher.revisionID(parent: base, kind: .live, canonicalBody: body)
                edits.append(ForeignRevision(
                    documentID: document.id, path: try RevisionPath(leaf: leaf, kind: .live, ancestors: [base]), body: .canonical(body)))
            }
        }
        let batches = try stride(from: 0, to: edits.count, by: 500).map {
            try DocumentStore.checkForeign(Array(edits[$0..<min($0 + 500, edits.count)]))
        }
        var cpu = 0.0
        for batch in batches {
            let began = BenchClock.cpuSeconds(CLOCK_THREAD_CPUTIME_ID)
            let results = try store.bulkInsertForeign(checked: batch)
            cpu += BenchClock.cpuSeconds(CLOCK_THREAD_CPUTIME_ID) - began
            guard results.allSatisfy({ $0.resolution == .notConflicted || $0.resolution == .resolved }) else {
                throw ValidationError("\(setup.rawValue): a conflict was left unsettled")
            }
        }
        return cpu
    }

    /// The policy the agent builds from `setup`'s config (rules, empty under `conflicts = automatic`).
    private func policy(_ setup: ResolveReplication.Setup) -> ConflictPolicy {
        guard let notes = setup.notes, let strategy = ResolutionStrategy(parsing: notes) else { return .rules(ResolutionRules()) }
        return .rules(ResolutionRules([
            ResolutionRule(name: "notes", fieldValue: "note", strategy: strategy),
            ResolutionRule(name: "settings", idPrefix: "set-", strategy: .remoteWins),
        ]))
    }
}
