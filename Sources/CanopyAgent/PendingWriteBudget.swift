import Foundation

/// Bounds the bytes queued for writing on a set of connections as a whole, on top of each
/// connection's own limit: forty `events` subscribers that stopped reading could each queue
/// `AgentLimits.adminPendingWriteBytesMax`, far more than the agent should hold for clients.
/// When the total goes over `totalMax`, the streaming connection (an `events` subscriber) with the
/// most queued, the slowest reader, is cut off first, then the next, until the total fits again.
/// Connections that only get replies come last: a client reading a 10 MB `bulk_docs` answer is
/// not at fault because subscribers filled the budget.
///
/// Thread-safe (connections report from their own queues). `cutOff` closures are called outside
/// the lock, at most once per connection until it reports again.
final class PendingWriteBudget: @unchecked Sendable {
    let totalMax: Int
    private let lock = NSLock()
    private var queued: [ObjectIdentifier: Entry] = [:]
    private var total = 0
    /// Told the bytes of each connection cut off (the server logs it).
    private let onCutOff: @Sendable (Int) -> Void

    private struct Entry {
        /// Queued in the connection.
        var queued: Int
        /// Handed to the connection's queue and not yet taken by it (an event line for a
        /// subscriber whose queue runs behind is memory all the same).
        var inFlight: Int
        var streaming: Bool
        var cutOff: @Sendable () -> Void
        var bytes: Int { queued + inFlight }
    }

    init(totalMax: Int, onCutOff: @escaping @Sendable (Int) -> Void = { _ in }) {
        precondition(totalMax > 0, "a budget must allow some bytes")
        self.totalMax = totalMax
        self.onCutOff = onCutOff
    }

    /// The bytes queued on every connection together.
    var totalBytes: Int { lock.withLock { total } }

    /// Records that `owner` has `bytes` queued now (0 forgets it); `streaming` says it is a
    /// stream (cut before the others); `cutOff` closes it if the budget must shed it.
    func update(_ owner: ObjectIdentifier, bytes: Int, streaming: Bool = false, cutOff: @escaping @Sendable () -> Void) {
        change(owner, streaming: streaming, cutOff: cutOff) { $0.queued = max(bytes, 0) }
    }

    /// Adds `delta` bytes handed to `owner`'s queue (positive when handed over, negative when the
    /// connection took them: `update` then counts them). Lines handed over are counted at once,
    /// so a connection whose queue runs behind cannot hold unbounded bytes in waiting blocks.
    func addInFlight(_ owner: ObjectIdentifier, _ delta: Int, streaming: Bool = false, cutOff: @escaping @Sendable () -> Void) {
        change(owner, streaming: streaming, cutOff: cutOff) { $0.inFlight = max($0.inFlight + delta, 0) }
    }

    private func change(_ owner: ObjectIdentifier, streaming: Bool, cutOff: @escaping @Sendable () -> Void, _ apply: (inout Entry) -> Void) {
        let shed: [Entry] = lock.withLock {
            var entry = queued[owner] ?? Entry(queued: 0, inFlight: 0, streaming: streaming, cutOff: cutOff)
            total -= entry.bytes
            apply(&entry)
            entry.streaming = streaming
            entry.cutOff = cutOff
            queued[owner] = entry.bytes > 0 ? entry : nil
            total += entry.bytes
            var shed: [Entry] = []
            while total > totalMax, let largest = queued.max(by: { ($0.value.streaming ? 1 : 0, $0.value.bytes) < ($1.value.streaming ? 1 : 0, $1.value.bytes) }) {
                queued[largest.key] = nil
                total -= largest.value.bytes
                shed.append(largest.value)
            }
            return shed
        }
        for connection in shed {
            onCutOff(connection.bytes)
            connection.cutOff()
        }
    }

    /// Forgets `owner` (its connection closed).
    func remove(_ owner: ObjectIdentifier) {
        lock.withLock {
            total -= queued.removeValue(forKey: owner)?.bytes ?? 0
        }
    }
}
