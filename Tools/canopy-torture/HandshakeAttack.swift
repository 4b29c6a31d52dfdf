import ArgumentParser
import CanopyAdmin
import CanopyCore
import Foundation

/// `handshake-attack`: an attacker holds silent TCP connections to agent A's peer port, from
/// another address, reopening each one A closes; meanwhile A's allowed peer B is restarted,
/// `--rounds` times, and the time from B's start until A reports B connected is measured.
struct HandshakeAttack: Experiment {
    static let configuration = CommandConfiguration(
        commandName: "handshake-attack", abstract: "Silent connections flood A's peer port; time an allowed peer's way back in.")

    @OptionGroup var common: CommonOptions
    @Option(help: "Rounds: B restarted, time until A reports it connected (default 5; 1 with --quick).") var rounds: Int?
    @Option(help: "Silent connections the attacker holds.") var connections = 100
    @Option(help: "The attacker's source address (a loopback address other than B's 127.0.0.1).")
    var attackerAddress = "127.0.0.2"
    @Option(help: "Shortest attack, in seconds, over which A's log lines are counted (default 60; 5 with --quick).")
    var attackSeconds: Double?
    @Option(help: "Target: seconds from B's start until A reports it connected.") var reconnectTarget = 2.0
    @Option(help: "Seconds to wait for B to connect in a round before counting the round as failed.") var roundLimit = 60.0

    func validate() throws {
        if let rounds, !(1...1000).contains(rounds) { throw ValidationError("--rounds must be 1…1000") }
        guard (1...10_000).contains(connections) else { throw ValidationError("--connections must be 1…10000") }
        if let attackSeconds, !(0...3600).contains(attackSeconds) { throw ValidationError("--attack-seconds must be 0…3600") }
        guard roundLimit >= reconnectTarget, roundLimit <= 3600 else {
            throw ValidationError("--round-limit must be ≥ --reconnect-target and ≤ 3600")
        }
    }

    func experiment() throws -> ExperimentResult {
        let roundCount = rounds ?? (common.quick ? 1 : 5)
        let minimumAttack = attackSeconds ?? (common.quick ? 5 : 60)
        let binaries = try common.binaries()
        let directory = try makeTemporaryDirectory("canopy-handshake")
        let a = try TortureAgent(name: "a", dataDir: directory + "/a", logDirectory: directory, binaries: binaries)
        let b = try TortureAgent(name: "b", dataDir: directory + "/b", logDirectory: directory, binaries: binaries)
        defer {
            b.stop()
            a.stop()
        }
        try a.startServing()
        guard let aPid = a.pid else { throw ExperimentFailure("a has no process") }
        // Only B dials: its way in is A's port, where the attacker's connections wait.
        try a.allow(b, dial: false)
        try b.startServing()
        try b.allow(a)
        let watcher = try EventWatcher(a)
        guard watcher.wait(for: Admin.PeerConnected.self, nodeID: b.nodeID, after: 0, limit: 60) != nil else {
            throw ExperimentFailure("b never connected to a before the attack: \(b.logTail())")
        }
        b.stop()

        let flood = SilentFlood(source: attackerAddress, port: a.port, count: connections)
        let linesBefore = a.logLineCount
        let cpuBefore = cpuSeconds(pid: aPid)
        let attackStart = now()
        flood.start()
        var floodRunning = true
        defer { if floodRunning { flood.stop() } }
        // Let the attacker fill every slot it can before B comes back.
        pause(1)
        var times: [Double] = []
        var failures: [String] = []
        for round in 0..<roundCount {
            let started = now()
            try b.launch()
            var connected = watcher.wait(for: Admin.PeerConnected.self, nodeID: b.nodeID, after: started, limit: reconnectTarget)
            if connected == nil {
                // Late: what b says about a then.
                if let row = try? b.peerRow(a.nodeID) {
                    let said = "connected \(row.connected), state \(row.state.rawValue), last_error \(row.lastError ?? "-")"
                    failures.append("round \(round + 1): at \(Figure.format(reconnectTarget)) s b's row for a: \(said)")
                }
                connected = watcher.wait(
                    for: Admin.PeerConnected.self, nodeID: b.nodeID, after: started, limit: roundLimit - reconnectTarget)
            }
            if let connected {
                times.append(connected - started)
                common.progress(
                    String(format: "round %d/%d: a reports b connected after %.3f s", round + 1, roundCount, connected - started))
            } else {
                times.append(roundLimit)
                failures.append("round \(round + 1): not connected within \(Figure.format(roundLimit)) s")
            }
            if case .exited(let status) = try b.waitServing() {
                throw ExperimentFailure("b exited with \(status): \(b.logTail())")
            }
            b.stop()
            if connected != nil { _ = watcher.wait(for: Admin.PeerDisconnected.self, nodeID: b.nodeID, after: started, limit: 30) }
        }
        let remaining = minimumAttack - (now() - attackStart)
        if remaining > 0 {
            common.progress(
                String(
                    format: "attack goes on for %.0f s more (log lines are counted over at least %.0f s)", remaining,
                    minimumAttack))
            pause(remaining)
        }
        flood.stop()
        floodRunning = false
        let attackDuration = now() - attackStart
        let lines = a.logLineCount - linesBefore
        let cpu = cpuSeconds(pid: aPid) - cpuBefore
        // A run shorter than a minute counts its lines as that minute's.
        let perMinute = linesPerMinute(lines, over: max(attackDuration, 60))

        var result = ExperimentResult(
            name: "handshake-attack",
            summary:
                "\(connections) silent connections from \(attackerAddress), reopened as closed; b restarted \(roundCount) times")
        var figures: [Figure] = [.count("rounds", "rounds", roundCount)]
        for (index, time) in times.enumerated() where roundCount <= 10 {
            figures.append(.seconds("round_\(index + 1)_seconds", "round \(index + 1): b's start to connected", time))
        }
        figures += [
            .seconds(
                "max_reconnect_seconds", "slowest: b's start to connected", times.max() ?? 0, target: .atMost(reconnectTarget)),
            .seconds("median_reconnect_seconds", "median: b's start to connected", times.sorted()[times.count / 2]),
            .count("silent_closed_by_agent", "silent connections closed by a (each reopened)", flood.closedByAgent.value),
            .seconds("attack_seconds", "attack duration", attackDuration),
            .count("log_lines", "a's log lines during the attack", lines),
            Figure(
                key: "log_lines_per_minute", label: "a's log lines per minute", value: perMinute, kind: .perMinute,
                target: .below(100)),
            Figure(
                key: "cpu_percent", label: "a's CPU during the attack (% of one core)", value: cpu / attackDuration * 100,
                kind: .percent),
        ]
        result.figures = figures
        result.notes = failures
        if flood.failedOpens.value > 0 {
            result.notes.append("\(flood.failedOpens.value) attacker connections could not be opened (retried)")
        }
        return result
    }
}
