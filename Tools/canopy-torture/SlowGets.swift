import CanopyAdmin
import CanopyAgent
import CanopyCore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The slow-gets phase of `admin-flood`: `clients` admin clients each ask again and again for one
/// large document and read its answer slowly, while the operator's own connection asks `status`
/// every 100 ms. What it measures is how long `status` takes on the socket (request written to
/// answer read, no process start), beside the same probe on the idle agent just before.
struct SlowGets {
    var statusAlone = LatencyProbe.Result()
    var statusDuring = LatencyProbe.Result()
    var getsAnswered = 0
    var clients = 0
    var bodyMiB = 0

    /// Runs the phase on `agent` for `seconds`.
    static func run(_ agent: TortureAgent, clients: Int, bodyMiB: Int, seconds: Double) throws -> SlowGets {
        var phase = SlowGets()
        phase.clients = clients
        phase.bodyMiB = bodyMiB
        let body: [String: JSONValue] = ["s": .string(String(repeating: "g", count: bodyMiB << 20))]
        _ = try agent.client(timeout: 120).call(Admin.PutDocument(doc: "slow-get-target", body: .object(body)))
        let probe = try LatencyProbe(agent)
        phase.statusAlone = probe.measure(for: 2)
        let answered = LockedCounter()
        let stop = LockedFlag()
        let group = DispatchGroup()
        for _ in 0..<clients {
            group.enter()
            Thread {
                defer { group.leave() }
                let fd = RawSocket.unix(agent.socketPath)
                guard fd >= 0 else { return }
                defer { close(fd) }
                while !stop.isSet {
                    guard RawSocket.send(fd, #"{"id":1,"cmd":"get","doc":"slow-get-target"}"# + "\n"), readSlowly(fd) else { return }
                    answered.add()
                }
            }.start()
        }
        pause(1)
        phase.statusDuring = probe.measure(for: seconds)
        stop.set()
        _ = group.wait(timeout: .now() + 60)
        phase.getsAnswered = answered.value
        return phase
    }

    /// Reads one response line 64 KiB at a time with 20 ms between reads (a slow client);
    /// false when the connection ended first.
    private static func readSlowly(_ fd: Int32) -> Bool {
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = recv(fd, &chunk, chunk.count, 0)
            guard count > 0 else { return false }
            if chunk[0..<count].contains(UInt8(ascii: "\n")) { return true }
            usleep(20_000)
        }
    }
}

/// `status` asked on one admin connection of its own, every 100 ms, timed on the socket.
final class LatencyProbe {
    struct Result {
        var answered = 0
        var failed = 0
        var slowest = 0.0
        var median = 0.0
    }

    private let client: AdminSocketClient

    init(_ agent: TortureAgent) throws { client = try agent.client(timeout: 30) }

    func measure(for seconds: Double) -> Result {
        var result = Result()
        var times: [Double] = []
        let end = now() + seconds
        while now() < end {
            let started = now()
            if case .success? = try? client.call(Admin.Status()) {
                times.append(now() - started)
            } else {
                result.failed += 1
            }
            pause(0.1)
        }
        result.answered = times.count
        result.slowest = times.max() ?? 0
        result.median = times.sorted().dropFirst(times.count / 2).first ?? 0
        return result
    }
}
