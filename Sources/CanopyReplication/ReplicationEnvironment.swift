import CanopyCore

/// The sources of nondeterminism a replicator uses, passed in through its initialiser (`Protocol/design.md` §9.2):
/// the agent passes Dispatch-backed ones, the simulator passes simulated ones. Nothing in this
/// module reads the system clock or the system random generator.

/// A handle that cancels scheduled work.
public protocol Cancellable: AnyObject, Sendable {
    /// Cancels the work if it has not run yet. Safe to call more than once.
    func cancel()
}

/// Runs work later on the replicator's serial context and tells the time.
///
/// Every callback a scheduler runs for one replicator runs on that replicator's serial context
/// (a serial DispatchQueue in the agent, the single simulated thread in the simulator), so the
/// replicator's state needs no further locking.
public protocol ReplicationScheduler: AnyObject, Sendable {
    /// Seconds on a monotonic clock (simulated time in the simulator).
    var now: Double { get }
    /// Runs `work` on the serial context after `seconds`.
    @discardableResult
    func schedule(after seconds: Double, _ work: @escaping @Sendable () -> Void) -> any Cancellable
    /// Runs `work` on the serial context as soon as possible, after the current work item.
    func execute(_ work: @escaping @Sendable () -> Void)
    /// Stops the process when the caller is not on the serial context (a replicator's state is
    /// touched only there). The default checks nothing: a scheduler that can tell implements it.
    func assertOnContext()
}

extension ReplicationScheduler {
    public func assertOnContext() {}
}

/// Random numbers for session ids and backoff jitter.
public protocol RandomSource: AnyObject, Sendable {
    /// The next 64 random bits.
    func next() -> UInt64
}

extension RandomSource {
    /// A uniform double in [0, 1).
    public func nextUnit() -> Double {
        Double(next() >> 11) * 0x1p-53
    }

    /// 16 random bytes as 32 lowercase hex characters (a session id).
    public func nextHexID() -> String {
        var bytes: [UInt8] = []
        for word in [next(), next()] {
            for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: word >> UInt64(shift))) }
        }
        return Hex.encode(bytes)
    }
}

/// Runs work off the replicator's serial context: the checks of received revisions (pure, CPU
/// bound) and their store writes, so that checking, writing and the protocol work on the serial
/// context overlap. `work` may run on any thread; the session keeps at most one write in flight
/// and the store serialises writers, so a worker needs no ordering of its own.
///
/// Invariant: `completion` runs on the serial context, with `work`'s output; for one worker,
/// completions may arrive in any order (the session restores arrival order itself).
public protocol ReplicationWorker: AnyObject, Sendable {
    /// Runs `work`, then `completion` with its output on the serial context.
    func run<Output: Sendable>(_ work: @escaping @Sendable () -> Output, then completion: @escaping @Sendable (Output) -> Void)
}

/// Runs the work and its completion at once, on the caller's thread: the default (tests, and the
/// simulator when asked for it; by default the simulator runs the agent's semantics on simulated
/// time, with completions in a seeded order).
public final class InlineReplicationWorker: ReplicationWorker {
    public init() {}

    public func run<Output: Sendable>(_ work: @escaping @Sendable () -> Output, then completion: @escaping @Sendable (Output) -> Void) {
        completion(work())
    }
}
