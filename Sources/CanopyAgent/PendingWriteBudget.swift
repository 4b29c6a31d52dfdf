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
        var bytes: Int
        var streaming: Bool
        var cutOff: @Sendable () -> Void
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
        let shed: [Entry] = lock.withLock {
            total -= queued[owner]?.bytes ?? 0
            queued[owner] = bytes > 0 ? Entry(bytes: bytes, streaming: streaming, cutOff: cutOff) : nil
            total += max(bytes, 0)
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
