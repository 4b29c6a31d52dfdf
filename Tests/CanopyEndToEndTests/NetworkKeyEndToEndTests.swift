import CanopyAgent
import CanopyCore
import Foundation
import Testing

/// `network-key`: agents that share it replicate; an agent with another key (or none) completes
/// no handshake with them, and says so.
@Suite("a private mesh's network key, against real agents", .serialized)
struct NetworkKeyEndToEndTests {
    /// `config` with the top-level line `line` after its `listen` line.
    static func adding(_ line: String, to config: String) -> String {
        config.replacingOccurrences(of: "\nlisten = ", with: "\n\(line)\nlisten = ")
    }

    /// An initialised agent whose config file sets `network-key = key` (none when nil).
    static func agent(key: String?) throws -> AgentProcess {
        let agent = try AgentProcess()
        if let key {
            let path = agent.dataDir + "/canopy.conf"
            let config = try String(contentsOfFile: path, encoding: .utf8)
            try adding("network-key = \(key)", to: config).write(toFile: path, atomically: true, encoding: .utf8)
        }
        try agent.start()
        return agent
    }

    @Test("agents with the same key replicate; one with another key or none completes no handshake with them, and its peer table says why; status says private, never the key")
    func onlyTheKeyHoldersReplicate() throws {
        let key = String(repeating: "5a", count: 32)
        let a = try Self.agent(key: key)
        let b = try Self.agent(key: key)
        try a.allow(b)
        try b.allow(a)
        _ = try a.put("shared", ["text": .string("within the mesh")])
        #expect(try b.ctl(["sync", a.nodeID, "--wait", "--timeout", "60"]).status == 0)
        #expect(try b.value(of: "shared", "text") == .string("within the mesh"))
        let status = try a.ctl(["--json", "status"]).stdout
        #expect(status.contains(#""network":"private""#) && !status.contains(key), "\(status)")

        for other in [try Self.agent(key: String(repeating: "a5", count: 32)), try Self.agent(key: nil)] {
            try other.allow(a)
            try a.allow(other)
            var lastError = ""
            try poll("the outsider to report the failed handshake") {
                let row = try DatabasesEndToEndTests.json(try other.ctl(["--json", "peers"]))["peers"]?.arrayValue?.first?.objectValue
                guard case .string(let error)? = row?["last_error"] else { return false }
                lastError = error
                return error.contains("handshake")
            }
            #expect(lastError.contains("network key"), "\(lastError)")
            #expect(try other.ctl(["sync", a.nodeID, "--wait", "--timeout", "2"]).status != 0)
            #expect(try other.ctl(["get", "shared"]).status == 4, "an outsider read the mesh's document")
        }
    }

    @Test("a malformed network-key is refused at start with FILE:LINE, and a changed one waits for a restart")
    func malformedKeyAndReload() throws {
        let agent = try AgentProcess()
        let path = agent.dataDir + "/canopy.conf"
        let original = try String(contentsOfFile: path, encoding: .utf8)
        try Self.adding("network-key = 1234", to: original).write(toFile: path, atomically: true, encoding: .utf8)
        let refused = try run(Binaries.canopyd, ["run", "--data-dir", agent.dataDir])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("canopy.conf:") && refused.stderr.contains("network-key must be 64 hex digits"), "\(refused.stderr)")

        try original.write(toFile: path, atomically: true, encoding: .utf8)
        try agent.start()
        try Self.adding("network-key = \(String(repeating: "0f", count: 32))", to: original).write(toFile: path, atomically: true, encoding: .utf8)
        #expect(try agent.ctl(["reload"]).stdout == "reloaded; restart canopyd to apply: network-key\n")
        #expect(try agent.ctl(["--json", "status"]).stdout.contains(#""network":"open""#))
        #expect(try agent.ctl(["shutdown"]).status == 0)
        try agent.restart()
        #expect(try agent.ctl(["--json", "status"]).stdout.contains(#""network":"private""#))
    }
}
