import CanopyAgent
import CanopyCore
import Foundation
import Testing

/// What a peer may do to a node's copy of `default`, set with `canopyctl share` and enforced by
/// the node that holds the data, between real agents over encrypted TCP.
@Suite("sharing the default database with rights, between real agents", .serialized)
struct SharingEndToEndTests {
    /// Two agents that allow each other; `a` dials `b`.
    static func pair() throws -> (AgentProcess, AgentProcess) {
        let a = try AgentProcess()
        let b = try AgentProcess()
        try a.start()
        try b.start()
        try b.allow(a)
        try a.allow(b)
        return (a, b)
    }

    @Test("a read-only peer scoped to a prefix gets those documents and their deletions, nothing else, and nothing of it is taken back")
    func readOnlyPrefixScopedPeer() throws {
        let (a, b) = try Self.pair()
        let shared = try a.ctl(["share", "default", b.nodeID, "--access", "read", "--prefix", "pub:"])
        #expect(shared.stdout == "shared default with \(b.nodeID): read (ids starting pub:)\n", "\(shared.stdout)\(shared.stderr)")
        _ = try a.put("pub:1", ["text": .string("for everyone")])
        let secret = try a.put("secret:1", ["text": .string("mine")])
        _ = try b.put("pub:2", ["text": .string("written on b")])
        let pubDeleted = try a.put("pub:gone", ["text": .string("soon deleted")])
        #expect(try a.ctl(["delete", "pub:gone", "--rev", pubDeleted]).status == 0)
        #expect(try a.ctl(["delete", "secret:1", "--rev", secret]).status == 0)

        #expect(try b.ctl(["sync", a.nodeID, "--wait", "--timeout", "60"]).status == 0)
        #expect(try b.value(of: "pub:1", "text") == .string("for everyone"))
        let changesOnB = try b.ctl(["changes"]).stdout
        #expect(changesOnB.contains("pub:gone"), "the deletion of a shared document reaches b: \(changesOnB)")
        #expect(!changesOnB.contains("secret:1"), "neither secret:1 nor its deletion reaches b: \(changesOnB)")
        #expect(try a.ctl(["sync", b.nodeID, "--wait", "--timeout", "60"]).status == 0)
        #expect(try a.ctl(["get", "pub:2"]).status == 4, "a never pulls from a peer that may only read")

        let peers = try DatabasesEndToEndTests.json(try a.ctl(["--json", "peers"]))
        #expect(peers["peers"]?.arrayValue?.first?.objectValue?["direction"] == .string("push"), "\(peers)")
        let list = try a.ctl(["db", "list"]).stdout
        #expect(list.contains("\(b.nodeID) (read, ids starting pub:)"), "\(list)")
    }

    @Test("a write-only peer scoped to a prefix pushes those documents in, may not pull, and unshare stops it")
    func writeOnlyPrefixScopedPeer() throws {
        let (a, b) = try Self.pair()
        #expect(try a.ctl(["share", "default", b.nodeID, "--access", "write", "--prefix", "inbox:"]).status == 0)
        _ = try a.put("private", ["text": .string("stays on a")])
        _ = try b.put("inbox:1", ["text": .string("dropped off")])
        _ = try b.put("other:1", ["text": .string("not a's to take")])

        #expect(try a.ctl(["sync", b.nodeID, "--wait", "--timeout", "60"]).status == 0)
        #expect(try a.value(of: "inbox:1", "text") == .string("dropped off"))
        #expect(try a.ctl(["get", "other:1"]).status == 4)
        try poll("b to learn that a does not let it pull") {
            let row = try DatabasesEndToEndTests.json(try b.ctl(["--json", "peers"]))["peers"]?.arrayValue?.first?.objectValue
            guard case .string(let error)? = row?["last_error"] else { return false }
            return error.contains("does not let this node pull")
        }
        #expect(try b.ctl(["get", "private"]).status == 4)

        #expect(try a.ctl(["unshare", "default", b.nodeID]).stdout == "unshared default with \(b.nodeID)\n")
        _ = try b.put("inbox:2", ["text": .string("after unshare")])
        let peers = try DatabasesEndToEndTests.json(try a.ctl(["--json", "peers"]))
        #expect(peers["peers"]?.arrayValue?.first?.objectValue?["direction"] == .string("none"), "\(peers)")
        #expect(try a.ctl(["sync", b.nodeID, "--wait", "--timeout", "5"]).status == 4, "nothing to sync with a peer that shares nothing")
        #expect(try a.ctl(["get", "inbox:2"]).status == 4)
        let config = try String(contentsOfFile: a.dataDir + "/canopy.conf", encoding: .utf8)
        #expect(config.contains("[share default \(b.nodeID)]\naccess = none\n"), "\(config)")
    }
}
