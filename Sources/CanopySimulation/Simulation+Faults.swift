import Foundation
import CanopyCore
import CanopyStore

/// The seeded fault schedule of the fault phase (`Protocol/design.md` §7.1), besides
/// the in-connection faults the links inject themselves (loss, duplication, reordering, reset
/// mid-batch):
///
///     partition   both ways or one way between two neighbours, for 1–20 s
///     clog        one direction holds its traffic for 1–8 s
///     reset       an open connection resets
///     crash       a node is killed at this step and restarts 1–15 s later from its files
///     pause       a node's deliveries, timers and worker are held for 1–40 s (past the 30 s
///                 dead-peer timeout sometimes)
///
/// and the storage faults (`StorageFaults`), unless the configuration turns them off:
///
///     ioError     the next commit of one of a node's stores fails with an I/O error and rolls back
///     diskFull    every commit of one of a node's stores fails with SQLITE_FULL for 1–10 s
///     tornCommit  a node dies inside the next commit of one of its stores, leaving the
///                 commit's last WAL frame torn (its other stores' files as they are), and
///                 restarts 1–15 s later; recovery drops that commit
///
/// and, with attachments, one more:
///
///     damagedContent  one byte of one attachment content file of a node flips for 1–30 s
///                 (repaired then, or by the heal): the node refuses to send it, and its peers
///                 must fetch it once it is repaired, on the connections they have
///
/// Every fault has ended by the end of the phase or is ended by the heal. Invariant 4 is checked
/// when a node is killed between two steps (its files are then exactly what the live store
/// holds) and again on the files a restart recovered.
extension Simulation {
    enum Fault: CaseIterable {
        case partition, oneWayPartition, clog, reset, crash, pause
        case ioError, diskFull, tornCommit
        case damagedContent

        static let network: [Fault] = [.partition, .oneWayPartition, .clog, .reset, .crash, .pause]
        static let storage: [Fault] = [.ioError, .diskFull, .tornCommit]
    }

    func scheduleFaults(until end: Double) {
        guard let mean = configuration.faults.meanSecondsBetweenFaults else { return }
        let kinds = (configuration.storageFaults ? Fault.network + Fault.storage : Fault.network)
            + (configuration.attachments ? [.damagedContent] : [])
        var time = 0.0
        while true {
            time += exponential(mean: mean, &faultRandom)
            guard time < end else { break }
            let fault = kinds[faultRandom.index(below: kinds.count)]
            let edge = edges[faultRandom.index(below: edges.count)]
            let (from, to) = faultRandom.chance(1, in: 2) ? (edge.a, edge.b) : (edge.b, edge.a)
            let node = faultRandom.index(below: nodes.count)
            let duration = 1 + faultRandom.next(below: 1000) // per-mille of the fault's range
            // The store a storage fault strikes, among the databases the node holds.
            let held = nodes[node].databases
            let database = held.count == 1 ? held[0] : held[faultRandom.index(below: held.count)]
            scheduler.schedule(after: time - scheduler.now) { [weak self] in
                self?.inject(fault, from: from, to: to, node: node, database: database, permille: Double(duration))
            }
        }
    }

    private func inject(_ fault: Fault, from: Int, to: Int, node: Int, database: DatabaseName, permille: Double) {
        let fraction = permille / 1000
        switch fault {
        case .partition: network.inject(.partition, from: from, to: to, fraction: fraction)
        case .oneWayPartition: network.inject(.oneWayPartition, from: from, to: to, fraction: fraction)
        case .clog: network.inject(.clog, from: from, to: to, fraction: fraction)
        case .reset: network.inject(.reset, from: from, to: to, fraction: fraction)
        case .crash, .pause, .ioError, .diskFull, .tornCommit, .damagedContent:
            injectNodeFault(fault, node: node, database: database, fraction: fraction)
        }
    }

    /// The faults of one node (a storage fault strikes its store of `database`); a node that is
    /// down takes none.
    private func injectNodeFault(_ fault: Fault, node: Int, database: DatabaseName, fraction: Double) {
        let victim = nodes[node]
        guard !victim.stores.isEmpty, let storage = victim.storage[database] else { return }
        let named = isMultiDatabase ? " \(database)" : ""
        switch fault {
        case .crash:
            let seconds = 1 + 14 * fraction
            network.count(fault: "crash", "n\(node) \(Int(seconds))s")
            checkCheckpointsAtCrash(of: node)
            kill(node, restartAfter: seconds)
        case .pause:
            guard !victim.scheduler.isPaused else { return }
            let seconds = 1 + 39 * fraction
            network.count(fault: "pause", "n\(node) \(Int(seconds))s")
            victim.scheduler.pause()
            scheduler.schedule(after: seconds) { [weak self] in
                victim.scheduler.resume()
                self?.trace.record("resume n\(node)")
            }
        case .ioError:
            network.count(fault: "ioError", "n\(node)\(named)")
            storage.failNextCommit = true
        case .diskFull:
            let seconds = 1 + 9 * fraction
            network.count(fault: "diskFull", "n\(node)\(named) \(Int(seconds))s")
            storage.fullUntil = max(storage.fullUntil ?? 0, scheduler.now + seconds)
        case .tornCommit:
            // Counted when the commit tears (a node that commits nothing before the heal never does).
            guard storage.tearNextCommit == nil else { return }
            storage.tearNextCommit = .init(keep: Int(faultRandom.next(below: 1 << 20)), downSeconds: 1 + 14 * fraction)
        case .damagedContent:
            damageContent(of: victim, seconds: 1 + 29 * fraction)
        case .partition, .oneWayPartition, .clog, .reset:
            preconditionFailure("\(fault) is not a node fault")
        }
    }

    /// Flips one byte of the content `victim` attached last (the one its peers are most likely
    /// still to fetch) and puts the original back after `seconds`.
    private func damageContent(of victim: SimulationNode, seconds: Double) {
        guard let store = victim.store, let last = attachedContent[victim.index] else { return }
        let path = store.attachments.directory + "/" + last.digest.hex
        guard damagedContent[path] == nil else { return }
        guard var bytes = try? [UInt8](Data(contentsOf: URL(fileURLWithPath: path))), !bytes.isEmpty else { return }
        damagedContent[path] = bytes
        bytes[faultRandom.index(below: bytes.count)] ^= 0x20
        guard (try? Data(bytes).write(to: URL(fileURLWithPath: path))) != nil else { return }
        network.count(fault: "damagedContent", "n\(victim.index) \(Int(seconds))s")
        scheduler.schedule(after: seconds) { [weak self] in self?.repairContent(path) }
    }

    /// Puts back the original bytes of a content file `damageContent` flipped (once).
    func repairContent(_ path: String) {
        guard let original = damagedContent.removeValue(forKey: path) else { return }
        try? Data(original).write(to: URL(fileURLWithPath: path))
        trace.record("repaired \(path.suffix(64).prefix(12))")
    }

    /// The node died inside a commit of its store of `database` (`StorageFaults`, armed by a
    /// `tornCommit` fault), on the stack of the store call that committed: kill it now, with the
    /// files the death left.
    func diedInsideCommit(node: Int, database: DatabaseName, image: CrashImage, downSeconds: Double) {
        network.count(fault: "tornCommit", "n\(node)\(isMultiDatabase ? " \(database)" : "") \(Int(downSeconds))s")
        kill(node, torn: (database, image), restartAfter: downSeconds)
    }

    /// Kills `node` with its files as they are now (`torn`: that database's as its image has
    /// them) and restarts it after `seconds`, unless the heal does first.
    private func kill(_ node: Int, torn: (database: DatabaseName, image: CrashImage)? = nil, restartAfter seconds: Double) {
        let victim = nodes[node]
        do {
            try victim.crash(torn: torn)
        } catch {
            crashCheckViolations.append(Violation(invariant: .lostWrite, documentID: nil, nodes: [node], detail: "could not keep the crashed node's files: \(error)"))
        }
        if hasResolvers { resolverClients[node].nodeDied() }
        scheduler.schedule(after: seconds) { [weak self] in
            guard let self, victim.stores.isEmpty else { return }
            do {
                try self.restart(node)
            } catch {
                self.trace.record("restart n\(node) failed: \(error)")
            }
        }
    }

    /// Opens a crashed node's files again (SQLite recovers the WAL), checks invariant 4 on what
    /// was recovered, and starts its replicators.
    func restart(_ node: Int) throws {
        try nodes[node].restart()
        trace.record("restart n\(node)")
        startResolverHub(node)
        checkCheckpointsAtCrash(of: node)
    }

    /// Invariant 4 at the moment of a crash or restart: the node's checkpoints, and its
    /// neighbours' checkpoints of it, must not be ahead of what is durably stored.
    private func checkCheckpointsAtCrash(of node: Int) {
        let checker = InvariantChecker(simulation: self)
        do {
            crashCheckViolations += try checker.checkCheckpoints(involving: node)
        } catch {
            crashCheckViolations.append(Violation(invariant: .checkpoint, documentID: nil, nodes: [node], detail: "check failed: \(error)"))
        }
    }

    /// Manual nodes resolve their oldest conflicts every few seconds; resolver nodes retry
    /// failed resolutions (the agent's periodic retry pass).
    func schedulePeriodicResolution(until end: Double) {
        guard configuration.policy == .manual || configuration.policy == .throwing else { return }
        var time = 3.0
        while time < end {
            scheduler.schedule(after: time - scheduler.now) { [weak self] in self?.resolvePass() }
            time += 3
        }
    }

    private func resolvePass() {
        for node in nodes where node.isRunning {
            guard let store = node.store else { continue }
            do {
                if configuration.policy == .manual {
                    for id in try store.conflictedDocumentIDs().prefix(2) {
                        let revision = try store.resolveConflicts(id: id, resolver: BuiltInResolver.mergeJSON)
                        trace.record("n\(node.index) resolved \(id) \(revision)", documents: [id])
                    }
                } else {
                    let results = try store.retryConflictResolution()
                    trace.record("n\(node.index) retried \(results.count) conflicts")
                }
            } catch {
                trace.record("n\(node.index) resolution pass failed: \(error)")
            }
        }
    }
}
