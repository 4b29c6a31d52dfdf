import CanopyReplication
import Dispatch

/// The replication engine's scheduler in the agent: one serial Dispatch queue (the engine's
/// serial context, `Protocol/design.md` §9.6) and the monotonic clock. The simulator passes its own instead.
final class DispatchReplicationScheduler: ReplicationScheduler, @unchecked Sendable {
    let queue: DispatchQueue

    init(queue: DispatchQueue) {
        self.queue = queue
    }

    var now: Double {
        let elapsed = monotonicNow().components
        return Double(elapsed.seconds) + Double(elapsed.attoseconds) * 1e-18
    }

    @discardableResult
    func schedule(after seconds: Double, _ work: @escaping @Sendable () -> Void) -> any Cancellable {
        let item = DispatchWorkItem(block: work)
        queue.asyncAfter(deadline: .now() + max(0, seconds), execute: item)
        return CancellableWorkItem(item)
    }

    func execute(_ work: @escaping @Sendable () -> Void) {
        queue.async(execute: work)
    }

    /// The engine's state is touched only on its queue; a call from anywhere else stops the process.
    func assertOnContext() {
        dispatchPrecondition(condition: .onQueue(queue))
    }
}

/// Cancels a scheduled Dispatch work item.
final class CancellableWorkItem: Cancellable, @unchecked Sendable {
    private let item: DispatchWorkItem

    init(_ item: DispatchWorkItem) {
        self.item = item
    }

    func cancel() {
        item.cancel()
    }
}

/// Randomness for session ids and backoff jitter from the system generator (the agent is the
/// I/O shell; only the simulator needs reproducible draws).
final class SystemRandomSource: RandomSource, @unchecked Sendable {
    func next() -> UInt64 {
        var generator = SystemRandomNumberGenerator()
        return generator.next()
    }
}

/// Runs the engine's checks and store writes of received revisions on Dispatch's global workers
/// and completes on the engine's serial queue, so that checking one received batch overlaps
/// writing the one before it, and both overlap the protocol work on the serial queue. The
/// simulator's `SimulatedWorker` has these semantics on simulated time (completions in an order
/// its seed picks); a change here belongs there too.
final class DispatchReplicationWorker: ReplicationWorker, @unchecked Sendable {
    private let queue: DispatchQueue

    init(queue: DispatchQueue) {
        self.queue = queue
    }

    func run<Output: Sendable>(_ work: @escaping @Sendable () -> Output, then completion: @escaping @Sendable (Output) -> Void) {
        let queue = self.queue
        DispatchQueue.global(qos: .userInitiated).async {
            let output = work()
            queue.async { completion(output) }
        }
    }
}
