import CanopyAgent
import CanopyCore
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What an agent killed during an attachment upload leaves, against real `canopyd` processes.
@Suite("attachment upload leftovers, against a real agent", .serialized)
struct AttachmentLeftoversEndToEndTests {
    /// The `incoming-` files in the agent's attachment directory.
    static func incomingFiles(_ agent: AgentProcess) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: agent.dataDir + "/attachments")) ?? [])
            .filter { $0.hasPrefix("incoming-") }.sorted()
    }

    @Test("kill -9 during an upload leaves its incoming file, which check does not list while the upload runs, and the next start removes and logs it")
    func killedUploadIsRemovedAtStart() throws {
        let agent = try AgentProcess()
        try agent.start()
        let client = try agent.client()
        let header: JSONValue = .object([
            "id": .int(1), "cmd": .string("attach"), "doc": .string("big"), "name": .string("blob"), "length": .int(64 << 20),
        ])
        try client.sendLine(CanonicalJSON.encode(header))
        #expect(try client.readObject()["upload"] != nil)
        try client.sendAll([UInt8](repeating: 7, count: 2 << 20)[...])
        try poll("the upload's incoming file to hold the bytes sent") {
            guard let name = Self.incomingFiles(agent).first else { return false }
            let size = (try? FileManager.default.attributesOfItem(atPath: agent.dataDir + "/attachments/" + name)[.size] as? Int) ?? 0
            return size == 2 << 20
        }
        // The upload in progress is this agent's own: not a leftover.
        let during = try agent.ctl(["check", "--json"])
        #expect(during.status == 0, "\(during)")
        #expect(try JSONValue.parse(Array(during.stdout.utf8)).objectValue?["leftovers"] == .array([]), "\(during.stdout)")

        agent.signal(SIGKILL)
        try waitForExit(agent.process)
        let left = Self.incomingFiles(agent)
        #expect(left.count == 1, "\(left)")
        try agent.restart()
        #expect(Self.incomingFiles(agent).isEmpty, "\(Self.incomingFiles(agent))")
        #expect(agent.log.contains("removed 1 unfinished attachment upload (2097152 bytes)"), "\(agent.log)")
        let after = try agent.ctl(["check"])
        #expect(after.status == 0 && !after.stdout.contains("leftover"), "\(after)")
    }

    @Test("an incoming file no upload of the running agent writes is listed by check as a leftover, and the data stays sound")
    func checkListsLeftovers() throws {
        let agent = try AgentProcess()
        try agent.start()
        #expect(try agent.ctl(["put", "doc", "--body", #"{"a":1}"#]).status == 0)
        try FileManager.default.createDirectory(atPath: agent.dataDir + "/attachments", withIntermediateDirectories: true)
        let name = "incoming-0123456789abcdef"
        try Data(repeating: 1, count: 1000).write(to: URL(fileURLWithPath: agent.dataDir + "/attachments/" + name))
        let check = try agent.ctl(["check"])
        #expect(check.status == 0, "\(check)")
        #expect(check.stdout.contains("leftover: attachments/\(name): 1000 bytes of an unfinished upload"), "\(check.stdout)")
        #expect(check.stdout.contains("the database is sound"), "\(check.stdout)")
        let json = try JSONValue.parse(Array(try agent.ctl(["check", "--json"]).stdout.utf8)).objectValue
        #expect(json?["sound"] == .bool(true))
        guard case .array(let leftovers)? = json?["leftovers"] else {
            Issue.record("no leftovers in \(String(describing: json))")
            return
        }
        #expect(leftovers.count == 1, "\(leftovers)")
    }
}
