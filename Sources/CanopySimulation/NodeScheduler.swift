import CanopyReplication

/// One simulated node's view of the shared `SimulatedScheduler`: everything the node's
/// replicators, sessions, worker and incoming deliveries schedule goes through it, so the
/// simulator can pause the node (its work is held, in order, until it resumes) or crash it (its
/// pending work is discarded, as a killed process's would be).
///
/// Invariants: held items run on `resume()` in the order they fell due; an item scheduled before
/// the latest `crash()` never runs, nor one scheduled while the node is down (between `crash()`
/// and `revive()`: code of the dead process still on the stack, such as the caller of a commit
/// the process died in, schedules nothing); a cancelled item never runs.
public final class NodeScheduler: ReplicationScheduler, @unchecked Sendable {
    /// Cancellation handle that also stops an item already held by a pause.
    private final class Token: Cancellable, @unchecked Sendable {
        var cancelled = false
        var inner: (any Cancellable)?
        func cancel() {
            cancelled = true
            inner?.cancel()
        }
    }

    private let base: SimulatedScheduler
    /// Incremented by every crash; work from an earlier epoch is dropped.
    private var epoch: UInt64 = 0
    /// Work that fell due while paused, in order.
    private var held: [(Token, @Sendable () -> Void)] = []
    /// True while the node is paused.
    public private(set) var isPaused = false
    /// True from a crash until `revive()`.
    public private(set) var isDown = false

    /// A view of `base` for one node.
    public init(base: SimulatedScheduler) {
        self.base = base
    }

    public var now: Double { base.now }

    @discardableResult
    public func schedule(after seconds: Double, _ work: @escaping @Sendable () -> Void) -> any Cancellable {
        let token = Token()
        if isDown {
            token.cancelled = true
            return token
        }
        let scheduledEpoch = epoch
        token.inner = base.schedule(after: seconds) { [weak self] in
            self?.fire(token, scheduledEpoch, work)
        }
        return token
    }

    public func execute(_ work: @escaping @Sendable () -> Void) {
        schedule(after: 0, work)
    }

    /// Runs an item that fell due, or holds it while paused; drops it when cancelled or from
    /// before a crash.
    private func fire(_ token: Token, _ scheduledEpoch: UInt64, _ work: @escaping @Sendable () -> Void) {
        guard !token.cancelled, scheduledEpoch == epoch else { return }
        if isPaused {
            held.append((token, work))
        } else {
            work()
        }
    }

    /// Holds every item that falls due from now on until `resume()`.
    public func pause() {
        isPaused = true
    }

    /// Runs the held items (each as its own step, in order) and stops holding.
    public func resume() {
        guard isPaused else { return }
        isPaused = false
        let items = held
        held = []
        let scheduledEpoch = epoch
        for (token, work) in items {
            // Each held item becomes its own step again; a new pause holds it again.
            base.execute { [weak self] in self?.fire(token, scheduledEpoch, work) }
        }
    }

    /// Forgets all pending and held work, as a process kill would, and drops what is scheduled
    /// until `revive()`.
    public func crash() {
        epoch += 1
        held = []
        isPaused = false
        isDown = true
    }

    /// Takes work again (the node's process restarted).
    public func revive() {
        isDown = false
    }
}
