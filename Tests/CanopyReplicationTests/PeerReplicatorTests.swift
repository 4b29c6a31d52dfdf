import Foundation
import CanopyCore
import CanopyReplication
import CanopySimulation
import CanopyStore
import Logging
import Testing

/// Dials `target` over a fresh in-memory link, failing the first `failures` attempts.
final class FlakyDialer: PeerDialer, @unchecked Sendable {
    let scheduler: SimulatedScheduler
    var failures: Int
    var attempts: [Double] = []
    var accept: (@Sendable (any MessageTransport) -> Void)?

    init(scheduler: SimulatedScheduler, failures: Int) {
        self.scheduler = scheduler
        self.failures = failures
    }

    func dial(_ completion: @escaping @Sendable (Result<any MessageTransport, ReplicationError>) -> Void) {
        attempts.append(scheduler.now)
        if failures > 0 {
            failures -= 1
            scheduler.schedule(after: 0.01) { completion(.failure(.disconnected("connection refused"))) }
            return
        }
        let link = InMemoryLink(scheduler: scheduler)
        let accept = self.accept
        scheduler.schedule(after: 0.001) {
            accept?(link.ends.1)
            completion(.success(link.ends.0))
        }
    }
}

@Suite("Peer replicators")
struct PeerReplicatorTests {
    @Test("an unreachable peer is retried with growing, jittered delays, then replication completes")
    func backoffThenSync() throws {
        let harness = try ReplicationHarness(seed: 51)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        try writeDocuments(b.store, prefix: "b", count: 120)
        let dialer = FlakyDialer(scheduler: harness.scheduler, failures: 4)
        final class States: @unchecked Sendable { var seen: [ReplicatorState] = [] }
        let states = States()
        let logger = Logger(label: "test")
        let replicatorA = PeerReplicator(
            peerName: "b", store: a.store, dialer: dialer, scheduler: harness.scheduler, random: harness.random,
            configuration: ReplicationConfiguration(continuous: true), backoff: Backoff(initialSeconds: 1, maximumSeconds: 30, jitter: 0.25),
            logger: logger, onStatus: { status in if states.seen.last != status.state { states.seen.append(status.state) } })
        let replicatorB = PeerReplicator(
            peerName: "a", store: b.store, dialer: nil, scheduler: harness.scheduler, random: harness.random,
            configuration: ReplicationConfiguration(continuous: true), logger: logger)
        replicatorB.start()
        dialer.accept = { replicatorB.accept($0) }
        final class Done: @unchecked Sendable { var result: Result<Void, ReplicationError>? }
        let done = Done()
        replicatorA.start()
        replicatorA.sync { done.result = $0 }
        harness.scheduler.run(until: { done.result != nil }, deadline: 600)
        guard case .success = done.result else {
            Issue.record("sync did not succeed: \(String(describing: done.result))")
            return
        }
        #expect(try a.store.documentCount == 120)
        #expect(dialer.attempts.count == 5)
        // Delays between attempts grow roughly as 1, 2, 4, 8 s (±25 %).
        let gaps = zip(dialer.attempts.dropFirst(), dialer.attempts).map { $0 - $1 }
        for (index, gap) in gaps.enumerated() {
            let base = pow(2.0, Double(index))
            #expect(gap >= base * 0.75 && gap <= base * 1.25 + 0.02)
        }
        #expect(states.seen.starts(with: [.connecting, .offline, .connecting]))
        #expect(replicatorA.status.state == .idle)
        #expect(try replicatorA.pendingDocumentIDs().isEmpty)
    }
}

/// A disk that is full until told otherwise: every commit fails as SQLite's does then.
final class FullDisk: StoreFaultInjector, @unchecked Sendable {
    private let lock = NSLock()
    private var isFull = true
    var full: Bool {
        get { lock.withLock { isFull } }
        set { lock.withLock { isFull = newValue } }
    }

    func beforeCommit() throws {
        if full { throw SQLiteError(code: 13, extendedCode: 13, message: "database or disk is full", sql: "COMMIT") }
    }

    func afterCommit() throws {}
}

extension PeerReplicatorTests {
    @Test("a store that cannot write is redialled on the store-failure schedule, growing from connection to connection; the failures are counted, and cleared once a batch is written")
    func storeFailuresBackOff() throws {
        let harness = try ReplicationHarness(seed: 52)
        let b = try harness.addNode("b")
        try writeDocuments(b.store, prefix: "b", count: 120)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("canopy-full-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let disk = FullDisk()
        let storeA = try DocumentStore(path: directory.appendingPathComponent("a.sqlite").path, configuration: .init(faultInjector: disk))
        let dialer = FlakyDialer(scheduler: harness.scheduler, failures: 0)
        let logger = Logger(label: "test")
        let replicatorA = PeerReplicator(
            peerName: "b", store: storeA, dialer: dialer, scheduler: harness.scheduler, random: harness.random,
            configuration: ReplicationConfiguration(direction: .pull, continuous: true),
            backoff: Backoff(initialSeconds: 0.5, maximumSeconds: 60, jitter: 0.25),
            storeFailureBackoff: Backoff(initialSeconds: 1, maximumSeconds: 8, jitter: 0.25), logger: logger)
        let replicatorB = PeerReplicator(
            peerName: "a", store: b.store, dialer: nil, scheduler: harness.scheduler, random: harness.random,
            configuration: ReplicationConfiguration(direction: .push, continuous: true), logger: logger)
        replicatorB.start()
        dialer.accept = { replicatorB.accept($0) }
        replicatorA.start()
        harness.scheduler.run(until: { dialer.attempts.count >= 6 }, deadline: 600)
        #expect(dialer.attempts.count == 6)
        #expect(replicatorA.status.storeFailures == 5, "\(replicatorA.status)")
        #expect(replicatorA.status.lastError?.contains("disk is full") == true, "\(String(describing: replicatorA.status.lastError))")
        // Every connection worked, yet the delays grow as 1, 2, 4, 8, 8 s (±25 %, and the moment
        // the session took to fail), where the dial schedule restarted at 0.5 s each time.
        let gaps = zip(dialer.attempts.dropFirst(), dialer.attempts).map { $0 - $1 }
        for (gap, base) in zip(gaps, [1.0, 2, 4, 8, 8]) {
            #expect(gap >= base * 0.75 && gap <= base * 1.25 + 0.5, "gaps \(gaps)")
        }

        disk.full = false
        final class Done: @unchecked Sendable { var result: Result<Void, ReplicationError>? }
        let done = Done()
        replicatorA.sync { done.result = $0 }
        harness.scheduler.run(until: { done.result != nil }, deadline: 600)
        guard case .success = done.result else {
            Issue.record("sync did not succeed: \(String(describing: done.result))")
            return
        }
        #expect(try storeA.documentCount == 120)
        #expect(replicatorA.status.storeFailures == 0)
    }
}

private func pow(_ base: Double, _ exponent: Double) -> Double {
    var result = 1.0
    for _ in 0..<Int(exponent) { result *= base }
    return result
}
