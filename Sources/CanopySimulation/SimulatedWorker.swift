import CanopyReplication

/// Where the simulated nodes' sessions check and write received revisions.
public enum SimulationWorker: String, Sendable, CaseIterable {
    /// `SimulatedWorker`: the production worker's semantics on simulated time (the default).
    case concurrent
    /// `InlineReplicationWorker`: work and completion at once, in order.
    case inline
}

/// Counts of the races a run went through, for the report (`SimulationReport.races`).
final class RaceCounters: @unchecked Sendable {
    /// Worker completions that ran after a completion of a later-submitted work of the same worker.
    var reorderedCompletions = 0
    /// Works submitted while an earlier one of the same worker had not completed.
    var overlappingWorks = 0
    /// Connections closed by the simultaneous-connect rule (the pair had another one).
    var simultaneousConnects = 0

    var counts: [String: Int] {
        ["overlapped": overlappingWorks, "reordered": reorderedCompletions, "simultaneousConnect": simultaneousConnects]
    }
}

/// The agent's `DispatchReplicationWorker` on simulated time: `work` runs "elsewhere" — as a step
/// of its own at a later instant the seed picks, while the node's protocol work goes on — and
/// `completion` runs on the node's serial context a moment after that, also chosen by the seed.
/// Several works of one worker are outstanding at once (the checks of a window of `revisions`
/// messages; the session keeps one write in flight), so their completions arrive in an order
/// the seed chooses, and the session must restore arrival order itself, as in production.
///
/// Both steps go through the node's `NodeScheduler`: a paused node's worker stops with it (a
/// stopped process's threads stop too) and a crash discards work not yet run or completed (a
/// killed process finishes nothing).
///
/// Delays: the work starts 0–4 ms after it is submitted, one time in fifty 20–200 ms (a slow disk
/// or a descheduled thread); the completion reaches the serial context 0–1 ms after the work.
/// Every draw comes from the worker stream of the seed, in scheduler order.
final class SimulatedWorker: ReplicationWorker, @unchecked Sendable {
    private let scheduler: NodeScheduler
    private let random: SeededRandom
    private let races: RaceCounters
    private var submitted: UInt64 = 0
    /// Submitted and not completed.
    private var outstanding = 0
    /// The newest ticket completed so far.
    private var newestCompleted: UInt64?

    init(scheduler: NodeScheduler, random: SeededRandom, races: RaceCounters) {
        self.scheduler = scheduler
        self.random = random
        self.races = races
    }

    func run<Output: Sendable>(_ work: @escaping @Sendable () -> Output, then completion: @escaping @Sendable (Output) -> Void) {
        let ticket = submitted
        submitted += 1
        if outstanding > 0 { races.overlappingWorks += 1 }
        outstanding += 1
        var startDelay = random.nextUnit() * 0.004
        if random.next() % 50 == 0 { startDelay += 0.02 + random.nextUnit() * 0.18 }
        scheduler.schedule(after: startDelay) { [self] in
            let output = work()
            let hop = random.nextUnit() * 0.001
            scheduler.schedule(after: hop) { [self] in
                outstanding -= 1
                if let newest = newestCompleted, ticket < newest {
                    races.reorderedCompletions += 1
                } else {
                    newestCompleted = ticket
                }
                completion(output)
            }
        }
    }
}
