import CanopyCore
import CanopyReplication

/// A deterministic scheduler on virtual time for the simulator and for in-process tests.
///
/// Work runs only inside `run…` calls, on the caller's thread, in order of (time, insertion
/// order): the same program with the same seed always runs the same steps in the same order. It is
/// not thread-safe and must be used from one thread, which is why it can claim `Sendable`.
public final class SimulatedScheduler: ReplicationScheduler, @unchecked Sendable {
    private struct Item {
        let time: Double
        let order: UInt64
        let token: Token
        let work: @Sendable () -> Void
    }

    /// Cancellation handle of one scheduled item.
    final class Token: Cancellable, @unchecked Sendable {
        var cancelled = false
        func cancel() { cancelled = true }
    }

    /// A binary min-heap on (time, insertion order).
    private var heap: [Item] = []
    private var nextOrder: UInt64 = 0
    /// Virtual seconds since the start.
    public private(set) var now: Double = 0
    /// Work items run so far.
    public private(set) var steps: UInt64 = 0

    /// A scheduler at virtual time 0.
    public init() {}

    @discardableResult
    public func schedule(after seconds: Double, _ work: @escaping @Sendable () -> Void) -> any Cancellable {
        let token = Token()
        push(Item(time: now + max(0, seconds), order: nextOrder, token: token, work: work))
        nextOrder += 1
        return token
    }

    public func execute(_ work: @escaping @Sendable () -> Void) {
        schedule(after: 0, work)
    }

    /// True when nothing is scheduled (cancelled items do not count).
    public var isIdle: Bool { !heap.contains { !$0.token.cancelled } }

    /// The time of the next pending item, if any. Cancelled items at the top of the heap are
    /// dropped first: the first uncancelled item in the heap's array order is not the earliest
    /// (a run could then stop at its deadline with earlier work still pending).
    public var nextTime: Double? {
        while let top = heap.first, top.token.cancelled { _ = pop() }
        return heap.first?.time
    }

    /// Forgets every pending item without running it. Pending work usually holds the objects
    /// that hold this scheduler (sessions' timers, links' deliveries), so an owner that is done
    /// calls this to break those cycles.
    public func removeAll() {
        heap.removeAll()
    }

    /// Runs one item; false when there was nothing to run.
    @discardableResult
    public func step() -> Bool {
        while !heap.isEmpty {
            let item = pop()
            if item.token.cancelled { continue }
            now = max(now, item.time)
            steps += 1
            item.work()
            return true
        }
        return false
    }

    /// Runs items until `condition` holds or nothing is left or `deadline` (virtual seconds) passes.
    /// Returns whether the condition holds.
    @discardableResult
    public func run(until condition: () -> Bool = { false }, deadline: Double = .infinity, stepLimit: UInt64 = .max) -> Bool {
        var ran: UInt64 = 0
        while !condition() {
            guard let next = nextTime, next <= deadline, ran < stepLimit else { return condition() }
            step()
            ran += 1
        }
        return true
    }

    /// Advances virtual time by `seconds`, running everything due.
    public func advance(by seconds: Double) {
        let end = now + seconds
        run(deadline: end)
        now = max(now, end)
    }

    // MARK: Binary heap on (time, order)

    private func less(_ a: Item, _ b: Item) -> Bool {
        a.time != b.time ? a.time < b.time : a.order < b.order
    }

    private func push(_ item: Item) {
        heap.append(item)
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard less(heap[child], heap[parent]) else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private func pop() -> Item {
        let top = heap[0]
        let last = heap.removeLast()
        if !heap.isEmpty {
            heap[0] = last
            var parent = 0
            while true {
                let left = 2 * parent + 1
                let right = left + 1
                var smallest = parent
                if left < heap.count && less(heap[left], heap[smallest]) { smallest = left }
                if right < heap.count && less(heap[right], heap[smallest]) { smallest = right }
                if smallest == parent { break }
                heap.swapAt(parent, smallest)
                parent = smallest
            }
        }
        return top
    }
}

/// A `RandomSource` over SplitMix64, for replay.
public final class SeededRandom: RandomSource, @unchecked Sendable {
    private var generator: SplitMix64

    /// A source seeded with `seed`.
    public init(seed: UInt64) {
        generator = SplitMix64(seed: seed)
    }

    public func next() -> UInt64 { generator.next() }
}
