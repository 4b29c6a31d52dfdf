import CanopyReplication
import Dispatch
import Foundation

/// Collects a connection's events and lets a test wait for them (bounded, never a bare sleep).
final class ConnectionEventLog: @unchecked Sendable {
    private let lock = NSLock()
    private var events: [ConnectionEvent] = []
    private let arrived = DispatchSemaphore(value: 0)

    func append(_ event: ConnectionEvent) {
        lock.withLock { events.append(event) }
        arrived.signal()
    }

    /// Waits for the next event (at most 30 s).
    func next() -> ConnectionEvent? {
        guard arrived.wait(timeout: .now() + 30) == .success else { return nil }
        return lock.withLock { events.removeFirst() }
    }

    /// Waits for the next event that `matches`, skipping others (heartbeats, say); nil when none
    /// comes within 30 s of the last.
    func next(where matches: (ConnectionEvent) -> Bool) -> ConnectionEvent? {
        while let event = next() {
            if matches(event) { return event }
        }
        return nil
    }
}
