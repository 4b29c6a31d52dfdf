import CanopyAgent
import CanopyCore
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A real `canopyd` whose admin clients all send the largest request lines at once: the bytes it
/// reads and holds for them together are bounded, not each client's alone.
@Suite("admin request bytes held for all clients together, against a real agent", .serialized)
struct AdminMemoryEndToEndTests {
    @Test("32 clients each sending a 19 MiB line at once: the agent stays under 400 MiB over its start, every client is answered, and status answers meanwhile")
    func largeLinesFromManyClientsAreBoundedTogether() throws {
        let agent = try AgentProcess()
        try agent.start()
        let pid = agent.process.processIdentifier
        let before = RSSSampler.residentBytes(pid)
        let rss = RSSSampler(pid: pid)
        // A put whose body is over the 16 MiB body limit, in a line under the 20 MiB line limit:
        // the whole line is read and decoded before the refusal, and nothing is written to disk.
        let line = Array(#"{"id":1,"cmd":"put","doc":"big","body":{"s":""#.utf8)
            + [UInt8](repeating: UInt8(ascii: "a"), count: 19 << 20) + Array(#""}}"#.utf8) + [UInt8(ascii: "\n")]
        let clientCount = 32
        let answers = Answers()
        let senders = try (0..<clientCount).map { _ in
            let client = try AdminSocketClient(path: agent.socketPath, receiveTimeoutSeconds: 300)
            return Thread {
                do {
                    try client.sendAll(line[...])
                    answers.add(try client.readObject())
                } catch {
                    answers.add(["client error": .string("\(error)")])
                }
            }
        }
        senders.forEach { $0.start() }
        var statusWhileSending = 0
        try poll("every client to be answered", limitSeconds: 600) {
            if answers.count < clientCount, try agent.ctl(["status"]).status == 0 { statusWhileSending += 1 }
            return answers.count == clientCount
        }
        let peak = rss.stop()
        #expect(statusWhileSending > 0)
        for answer in answers.all {
            #expect(errorCode(of: answer) == "invalid_argument", "\(answer)")
        }
        #expect(peak - before < 400 << 20, "RSS \(before >> 20) MiB before, peak \(peak >> 20) MiB")
    }
}

extension AdminMemoryEndToEndTests {
    @Test("clients that stall in the middle of large lines hold the room for large requests only until they are closed; the next large request is then served")
    func stalledLargeLinesAreClosed() throws {
        let agent = try AgentProcess()
        try agent.start()
        // Each takes one of the grants for a large line (past its own 1 MiB) and sends no more.
        let partial = Array(#"{"id":1,"cmd":"put","doc":"stalled","body":{"s":""#.utf8) + [UInt8](repeating: UInt8(ascii: "b"), count: 2 << 20)
        let grants = AgentLimits.adminRequestBytesSharedMax / AgentLimits.adminLineBytesMax
        let stalled = try (0..<grants).map { _ in try AdminSocketClient(path: agent.socketPath, receiveTimeoutSeconds: 120) }
        for client in stalled { try client.sendAll(partial[...]) }
        // A whole large put: it waits for a grant, and gets one once a stalled client is closed.
        let waiting = try AdminSocketClient(path: agent.socketPath, receiveTimeoutSeconds: 120)
        let whole = Array(#"{"id":2,"cmd":"put","doc":"served","body":{"s":""#.utf8)
            + [UInt8](repeating: UInt8(ascii: "c"), count: 3 << 20) + Array(#""}}"#.utf8) + [UInt8(ascii: "\n")]
        let answers = Answers()
        let sender = Thread {
            do {
                try waiting.sendAll(whole[...])
                answers.add(try waiting.readObject())
            } catch {
                answers.add(["client error": .string("\(error)")])
            }
        }
        sender.start()
        let started = Date()
        #expect(try agent.ctl(["status"]).status == 0, "the operator is answered meanwhile")
        try poll("the large put to be answered", limitSeconds: AgentLimits.adminGrantStallSeconds + 60) { answers.count == 1 }
        let waited = Date().timeIntervalSince(started)
        #expect(answers.all.first?["ok"] == .bool(true), "\(answers.all)")
        #expect(waited >= AgentLimits.adminGrantStallSeconds - 5, "served after the stalled clients were closed, not before (\(waited) s)")
        for client in stalled {
            let told = try client.readObject()
            #expect(errorCode(of: told) == "invalid_argument" && (told["error"]?.objectValue?["message"]?.stringValue?.contains("no byte") ?? false), "\(told)")
        }
        #expect(try agent.value(of: "served", "s")?.stringValue?.count == 3 << 20)
        #expect(try agent.value(of: "stalled", "s") == nil)
        try poll("the closing in the log") { agent.log.contains("sent no byte of its large request") }
    }
}

/// The responses the sending threads read.
private final class Answers: @unchecked Sendable {
    private let lock = NSLock()
    private var answers: [[String: JSONValue]] = []
    var count: Int { lock.withLock { answers.count } }
    var all: [[String: JSONValue]] { lock.withLock { answers } }
    func add(_ answer: [String: JSONValue]) { lock.withLock { answers.append(answer) } }
}
