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

/// The responses the sending threads read.
private final class Answers: @unchecked Sendable {
    private let lock = NSLock()
    private var answers: [[String: JSONValue]] = []
    var count: Int { lock.withLock { answers.count } }
    var all: [[String: JSONValue]] { lock.withLock { answers } }
    func add(_ answer: [String: JSONValue]) { lock.withLock { answers.append(answer) } }
}
