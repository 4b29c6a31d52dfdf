import ArgumentParser
import CanopyAdmin
import CanopyAgent
import CanopyCore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// `admin-flood`: agent A's admin socket under (a) `--clients` clients connecting at once and
/// holding on, then (b) `--slow-gets` clients asking for a 15 MiB document and reading slowly
/// (the operator's `status` timed on the socket, `SlowGets`), then (c) `--subscribers` event
/// subscribers that never read while documents are written. Measures A's memory over its baseline, the subscribers cut, how the operator's own
/// `canopyctl status` fares meanwhile (it must be answered: the agent closes an idle client to
/// make room, or serves it on an operator slot; `busy` is a failure), and A's log lines per minute.
struct AdminFlood: Experiment {
    static let configuration = CommandConfiguration(
        commandName: "admin-flood",
        abstract: "Flood the admin socket with clients and stalled subscribers; measure memory and service.")

    @OptionGroup var common: CommonOptions
    @Option(help: "Admin clients connecting at once (default 500; 200 with --quick).") var clients: Int?
    @Option(help: "Event subscribers that never read (default 40; 10 with --quick).") var subscribers: Int?
    @Option(help: "Documents written while they stall (default 40000; 4000 with --quick).") var documents: Int?
    @Option(help: "Target: A's peak resident memory over its baseline, MiB.") var rssTarget = 256.0
    @Option(help: "Clients asking for a large document again and again, reading slowly (default 60; 20 with --quick).")
    var slowGets: Int?
    @Option(help: "How long the slow gets run, seconds (default 15; 5 with --quick).") var slowGetSeconds: Double?
    @Option(help: "Target: the operator's slowest status on the socket during the slow gets, seconds.") var statusTarget = 0.1

    func validate() throws {
        if let clients, !(1...10_000).contains(clients) { throw ValidationError("--clients must be 1…10000") }
        if let subscribers, !(1...60).contains(subscribers) {
            throw ValidationError("--subscribers must be 1…60 (the agent serves 64 clients)")
        }
        if let documents, !(1...1_000_000).contains(documents) { throw ValidationError("--documents must be 1…1000000") }
        if let slowGetSeconds, !(1...3600).contains(slowGetSeconds) { throw ValidationError("--slow-get-seconds must be 1…3600") }
        if let slowGets, !(1...63).contains(slowGets) { throw ValidationError("--slow-gets must be 1…63 (the agent serves 64 clients; the probe takes one)") }
    }

    func experiment() throws -> ExperimentResult {
        let clientCount = clients ?? (common.quick ? 200 : 500)
        let subscriberCount = subscribers ?? (common.quick ? 10 : 40)
        let documentCount = documents ?? (common.quick ? 4000 : 40_000)
        let binaries = try common.binaries()
        let directory = try makeTemporaryDirectory("canopy-admin")
        let a = try TortureAgent(name: "a", dataDir: directory + "/a", logDirectory: directory, binaries: binaries)
        defer { a.stop() }
        try a.startServing()
        guard let pid = a.pid else { throw ExperimentFailure("a has no process") }
        _ = waitUntil(limit: 10) { Self.adminClients(a) == 1 }
        let baseline = a.residentBytes
        let linesBefore = a.logLineCount
        let floodStart = now()

        common.progress("\(clientCount) admin clients at once")
        let sampler = RSSSampler(pid: pid)
        let operatorA = OperatorProbe(agent: a)
        let answers = connectAtOnce(a, count: clientCount, operatorProbe: operatorA)
        let peakClients = sampler.peakBytes()
        var recovered: Double?
        let releaseTime = now()
        if waitUntil(limit: 30, { (try? a.ctl(["status"]).status) == 0 }) { recovered = now() - releaseTime }

        let getClients = slowGets ?? (common.quick ? 20 : 60)
        common.progress("\(getClients) clients asking for a 15 MiB document and reading slowly")
        let gets = try SlowGets.run(a, clients: getClients, bodyMiB: 15, seconds: slowGetSeconds ?? (common.quick ? 5 : 15))

        // The same writes on a fresh agent with no stalled subscriber: what they cost by themselves.
        let control = try TortureAgent(
            name: "control", dataDir: directory + "/control", logDirectory: directory, binaries: binaries)
        defer { control.stop() }
        try control.startServing()
        common.progress("control: \(documentCount) documents written on another agent with no stalled subscriber")
        let alone = try writePhase(control, documents: documentCount, stalledSubscribers: 0)
        control.stop()
        common.progress("\(subscriberCount) event subscribers that never read, \(documentCount) documents written")
        let stalled = try writePhase(a, documents: documentCount, stalledSubscribers: subscriberCount)
        let floodSeconds = now() - floodStart
        let lines = a.logLineCount - linesBefore

        let mib = { (bytes: Int) in Double(bytes) / Double(1 << 20) }
        var result = ExperimentResult(
            name: "admin-flood",
            summary:
                "\(clientCount) admin clients at once, then \(subscriberCount) stalled subscribers during \(documentCount) writes"
        )
        result.figures = [
            Figure(key: "baseline_rss_mib", label: "a's resident memory before", value: mib(baseline), kind: .mebibytes),
            .count("clients", "clients connecting at once", clientCount),
            .count("clients_answered", "clients answered", answers.ok),
            .count("clients_busy", "clients told busy", answers.busy),
            .count("clients_unanswered", "clients with no answer", answers.none),
            .count(
                "operator_ok_during_clients", "operator status ok during the client flood", operatorA.counts.ok, target: .atLeast(1)),
            .count(
                "operator_busy_during_clients", "operator status busy (exit 6) during it", operatorA.counts.busy, target: .equal(0)),
            .count(
                "operator_failed_during_clients", "operator status failed otherwise", operatorA.counts.other, target: .equal(0)),
            .seconds("operator_slowest_during_clients", "slowest operator status during it", operatorA.slowestSeconds),
            .flag("operator_ok_after", "operator status ok once the clients left", recovered != nil, required: true),
            .seconds("operator_ok_after_seconds", "time until then", recovered ?? 30),
            Figure(
                key: "peak_rss_clients_mib", label: "peak memory over baseline, client flood", value: mib(peakClients - baseline),
                kind: .mebibytes),
            .count("slow_get_clients", "clients asking for a 15 MiB document, reading slowly", gets.clients),
            .count("slow_gets_answered", "their gets answered", gets.getsAnswered, target: .atLeast(1)),
            .seconds("operator_status_alone", "operator status on the socket, idle agent (slowest)", gets.statusAlone.slowest),
            .seconds("operator_status_median_during_gets", "operator status during the slow gets (median)", gets.statusDuring.median),
            .seconds(
                "operator_status_slowest_during_gets", "operator status during the slow gets (slowest)", gets.statusDuring.slowest,
                target: .atMost(statusTarget)),
            .count("operator_status_failed_during_gets", "operator status failed during them", gets.statusDuring.failed, target: .equal(0)),
            .count("subscribers", "subscribers that never read", subscriberCount),
            Figure(
                key: "unread_event_mib", label: "event bytes sent to them, if all were kept",
                value: mib(stalled.eventBytes * subscriberCount), kind: .mebibytes),
            .count("subscribers_cut", "subscribers cut by a", stalled.cut),
            .count(
                "reader_events", "document events a reading subscriber got", stalled.readerEvents,
                target: .equal(Double(documentCount))),
            .seconds("write_seconds", "time to write the documents", stalled.writeSeconds),
            .seconds("write_seconds_alone", "the same writes, no stalled subscriber", alone.writeSeconds),
            .count("operator_ok_during_writes", "operator status ok during the writes", stalled.operatorCounts.ok, target: .atLeast(1)),
            .count(
                "operator_busy_during_writes", "operator status busy (exit 6) during them", stalled.operatorCounts.busy, target: .equal(0)),
            .count(
                "operator_failed_during_writes", "operator status failed otherwise", stalled.operatorCounts.other,
                target: .equal(0)),
            .seconds("operator_slowest_during_writes", "slowest operator status during them", stalled.operatorSlowest),
            .seconds("operator_slowest_alone", "the same, no stalled subscriber", alone.operatorSlowest),
            Figure(
                key: "peak_rss_subscribers_mib", label: "peak memory over baseline, subscribers",
                value: mib(stalled.peakOverBaseline), kind: .mebibytes, target: .atMost(rssTarget)),
            Figure(
                key: "peak_rss_alone_mib", label: "the same writes, no stalled subscriber", value: mib(alone.peakOverBaseline),
                kind: .mebibytes),
            .count("log_lines", "a's log lines during the flood", lines),
            Figure(
                key: "log_lines_per_minute", label: "a's log lines per minute",
                value: linesPerMinute(lines, over: max(floodSeconds, 60)), kind: .perMinute, target: .below(100)),
        ]
        result.notes += (operatorA.failures + stalled.operatorFailures).prefix(3).map { "operator status: \($0)" }
        return result
    }

    /// How the clients connecting at once were answered.
    typealias ClientAnswers = (ok: Int, busy: Int, none: Int)

    /// What one write phase measured.
    struct WritePhase {
        var peakOverBaseline = 0
        var writeSeconds = 0.0
        var eventBytes = 0
        var readerEvents = 0
        var cut = 0
        var operatorCounts = (ok: 0, busy: 0, other: 0)
        var operatorSlowest = 0.0
        var operatorFailures: [String] = []
    }

    /// `documents` written on `agent` while `stalledSubscribers` subscribers never read, one reads
    /// every event, and the operator's probe runs.
    private func writePhase(_ agent: TortureAgent, documents: Int, stalledSubscribers: Int) throws -> WritePhase {
        guard let pid = agent.pid else { throw ExperimentFailure("\(agent.name) has no process") }
        let baseline = agent.residentBytes
        let sampler = RSSSampler(pid: pid)
        let stalled = (0..<stalledSubscribers).map { _ -> Int32 in
            let fd = RawSocket.unix(agent.socketPath)
            if fd >= 0 { RawSocket.send(fd, "{\"id\":1,\"cmd\":\"events\"}\n") }
            return fd
        }
        defer { stalled.filter { $0 >= 0 }.forEach { close($0) } }
        let reader = try EventVolume(agent, expected: documents)
        let probe = OperatorProbe(agent: agent)
        probe.start()
        let writeStart = now()
        try write(agent, count: documents)
        var phase = WritePhase()
        phase.writeSeconds = now() - writeStart
        _ = reader.wait(limit: 120)
        probe.stop()
        phase.peakOverBaseline = sampler.peakBytes() - baseline
        pause(1)
        phase.cut = stalled.filter { $0 < 0 || Self.peerClosed($0) }.count
        phase.eventBytes = reader.bytes.value
        phase.readerEvents = reader.events.value
        phase.operatorCounts = probe.counts
        phase.operatorSlowest = probe.slowestSeconds
        phase.operatorFailures = probe.failures
        return phase
    }

    /// `count` clients connect at once (from 4 threads), each sends `status` and reads its answer;
    /// they hold on for 2 s while the operator's probe runs, then all close.
    private func connectAtOnce(_ agent: TortureAgent, count: Int, operatorProbe: OperatorProbe) -> ClientAnswers {
        let ok = LockedCounter()
        let busy = LockedCounter()
        let none = LockedCounter()
        let group = DispatchGroup()
        let release = DispatchSemaphore(value: 0)
        let threads = 4
        for thread in 0..<threads {
            group.enter()
            Thread {
                var fds: [Int32] = []
                for _ in stride(from: thread, to: count, by: threads) {
                    let fd = RawSocket.unix(agent.socketPath)
                    if fd >= 0 { RawSocket.send(fd, "{\"id\":1,\"cmd\":\"status\"}\n") }
                    fds.append(fd)
                }
                for fd in fds {
                    guard fd >= 0, let line = Self.readLine(fd, timeout: 10) else {
                        none.add()
                        continue
                    }
                    if line.contains("\"ok\":true") {
                        ok.add()
                    } else if line.contains("\"busy\"") {
                        busy.add()
                    } else {
                        none.add()
                    }
                }
                group.leave()
                release.wait()
                fds.filter { $0 >= 0 }.forEach { close($0) }
            }.start()
        }
        group.wait()
        operatorProbe.start()
        pause(2)
        operatorProbe.stop()
        for _ in 0..<threads { release.signal() }
        return (ok.value, busy.value, none.value)
    }

    /// Documents with ids near the 1 KiB limit (each event line about 1.1 KB), by `bulk_docs` of 1000.
    private func write(_ agent: TortureAgent, count: Int) throws {
        let client = try agent.client(timeout: 300)
        let padding = String(repeating: "x", count: 1000)
        for start in stride(from: 0, to: count, by: 1000) {
            let docs = (start..<min(start + 1000, count)).map { index in
                JSONValue.object(["_id": .string("\(padding)-\(index)"), "n": .int(Int64(index))])
            }
            try agent.call(Admin.BulkDocuments(docs: docs), on: client)
        }
    }

    /// One line from a blocking socket, waiting at most `timeout` seconds.
    static func readLine(_ fd: Int32, timeout: Double) -> String? {
        var value = timeval(tv_sec: Int(timeout), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while recv(fd, &byte, 1, 0) == 1 {
            if byte == UInt8(ascii: "\n") { return String(decoding: bytes, as: UTF8.self) }
            bytes.append(byte)
        }
        return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self)
    }

    /// The agent has closed this connection (whatever is still unread).
    static func peerClosed(_ fd: Int32) -> Bool {
        var entry = pollfd(fd: fd, events: Self.pollReadHangUp, revents: 0)
        return poll(&entry, 1, 0) > 0 && entry.revents & (Self.pollReadHangUp | Int16(POLLHUP | POLLERR)) != 0
    }

    /// `POLLRDHUP` (Linux, `<poll.h>` with `_GNU_SOURCE`; not in Swift's Glibc module): the peer
    /// closed, reported even while unread bytes remain.
    static let pollReadHangUp: Int16 = 0x2000

    static func adminClients(_ agent: TortureAgent) -> Int {
        guard let stats = try? agent.call(Admin.Stats(), on: agent.client(timeout: 10)) else { return -1 }
        return Int(stats.adminClients)
    }
}

/// The operator running `canopyctl status` every 100 ms on a thread of its own: counts exits 0,
/// 6 (busy) and anything else.
final class OperatorProbe: BackgroundLoop, @unchecked Sendable {
    private let agent: TortureAgent
    private let lock = NSLock()
    private var ok = 0, busy = 0, other = 0
    private var slowest = 0.0
    private(set) var failures: [String] = []

    init(agent: TortureAgent) { self.agent = agent }

    var counts: (ok: Int, busy: Int, other: Int) { lock.withLock { (ok, busy, other) } }
    /// The longest a `canopyctl status` took (process start to exit), in seconds.
    var slowestSeconds: Double { lock.withLock { slowest } }

    override func run() {
        repeat {
            let started = now()
            let result = try? agent.ctl(["status"], limit: 30)
            let seconds = now() - started
            lock.withLock {
                slowest = max(slowest, seconds)
                switch result?.status {
                case 0: ok += 1
                case 6: busy += 1
                default:
                    other += 1
                    failures.append("exit \(result.map { String($0.status) } ?? "-"): \(result?.stderr.prefix(120) ?? "")")
                }
            }
            pause(0.1)
        } while !stopping
    }
}

/// A subscriber that reads: counts the `document.changed` events and the bytes of their lines,
/// which is what each subscriber that never reads is sent.
final class EventVolume: @unchecked Sendable {
    let events = LockedCounter()
    let bytes = LockedCounter()
    private let expected: Int
    private let done = DispatchSemaphore(value: 0)

    init(_ agent: TortureAgent, expected: Int) throws {
        self.expected = expected
        let client = try agent.client(timeout: 120)
        try agent.call(Admin.Subscribe(), on: client)
        let changed = Admin.DocumentEvent.Kind.changed.rawValue
        Thread { [self] in
            while events.value < expected, let line = try? client.readLine() {
                if case .event(let event)? = try? AdminLine.read(line), event.type == changed {
                    events.add()
                    bytes.add(line.count + 1)
                }
            }
            done.signal()
        }.start()
    }

    /// True when every expected event arrived within `limit` seconds.
    func wait(limit: Double) -> Bool {
        _ = done.wait(timeout: .now() + limit)
        return events.value >= expected
    }
}
