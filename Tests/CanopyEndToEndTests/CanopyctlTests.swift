import CanopyAgent
import CanopyCore
import Foundation
import Testing

@Suite("canopyctl against a real agent", .serialized)
struct CanopyctlTests {
    @Test("exit codes: 0 ok, 2 usage, 3 conflict, 4 not found, 1 other errors")
    func exitCodes() throws {
        let agent = try AgentProcess()
        try agent.start()
        let put = try agent.ctl(["put", "doc1", "--body", #"{"a":1}"#])
        #expect(put.status == 0)
        let parts = put.stdout.split(separator: " ")
        #expect(parts.first == "doc1")
        let rev = parts.last.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) } ?? ""
        #expect(RevisionID(rev)?.generation == 1)

        let stale = try agent.ctl(["put", "doc1", "--body", #"{"a":2}"#])
        #expect(stale.status == 3)
        #expect(stale.stderr.contains("conflict"))

        #expect(try agent.ctl(["get", "nothing-here"]).status == 4)
        #expect(try agent.ctl(["frobnicate"]).status == 2)
        #expect(try agent.ctl(["resolve", "doc1"]).status == 2)  // needs exactly one of --pick/--body/--delete
        #expect(try agent.ctl(["put", "doc1", "--body", "{not json"]).status == 2)
        #expect(try agent.ctl(["delete", "doc1", "--rev", "1-00000000000000000000000000000000"]).status == 3)
        let noRevision = try agent.ctl(["delete", "doc1"])
        #expect(noRevision.status == 2 && noRevision.stderr.contains("give --rev REV"), "\(noRevision.stderr)")
        #expect(try agent.ctl(["sync", testNodeID(4)]).status == 4)

        let fromStdin = try agent.ctl(["put", "doc2"], stdin: #"{"from":"stdin"}"#)
        #expect(fromStdin.status == 0)
        let got = try agent.ctl(["--json", "get", "doc2"])
        #expect(got.status == 0)
        let value = try JSONValue.parse(got.stdout.trimmingCharacters(in: .newlines))
        #expect(value.objectValue?["doc"]?.objectValue?["from"] == .string("stdin"))

        let deleted = try agent.ctl(["delete", "doc1", "--rev", rev])
        #expect(deleted.status == 0)
    }

    @Test("exit code 5 when no agent answers, naming the socket path tried")
    func unreachableAgent() throws {
        let temporary = TemporaryDirectory()
        let result = try run(Binaries.canopyctl, ["--data-dir", temporary.path, "status"])
        #expect(result.status == 5)
        #expect(result.stderr.contains(temporary.path + "/admin.sock"))
        let socket = try run(Binaries.canopyctl, ["--socket", temporary.path + "/x.sock", "status"])
        #expect(socket.status == 5)
        #expect(socket.stderr.contains(temporary.path + "/x.sock"))
    }

    @Test("export then import into a fresh agent reproduces every document and revision")
    func exportImportRoundTrip() throws {
        let source = try AgentProcess()
        try source.start()
        for index in 0..<5 { #expect(try source.ctl(["put", "k\(index)", "--body", #"{"i":\#(index)}"#]).status == 0) }
        let exported = try source.ctl(["export"])
        #expect(exported.status == 0)

        let target = try AgentProcess()
        try target.start()
        let imported = try target.ctl(["import", "-"], stdin: exported.stdout)
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(try target.ctl(["export"]).stdout == exported.stdout)
        let status = try JSONValue.parse(try target.ctl(["--json", "status"]).stdout.trimmingCharacters(in: .newlines))
        #expect(status.objectValue?["doc_count"] == .int(5))
    }

    @Test("status and peers print tables by default and JSON with --json")
    func statusOutput() throws {
        let agent = try AgentProcess()
        try agent.start()
        let peer = testNodeID(5)
        #expect(try agent.ctl(["peer", "add", peer, "127.0.0.1:9", "--direction", "push", "--mode", "once"]).status == 0)
        let table = try agent.ctl(["status"])
        #expect(table.status == 0)
        #expect(table.stdout.contains(agent.nodeID))
        #expect(table.stdout.contains(peer))
        let json = try JSONValue.parse(try agent.ctl(["--json", "peers"]).stdout.trimmingCharacters(in: .newlines))
        guard case .array(let peers)? = json.objectValue?["peers"] else {
            Issue.record("no peers in \(json)")
            return
        }
        #expect(peers.first?.objectValue?["mode"] == .string("once"))
        #expect(try agent.ctl(["peer", "remove", peer]).status == 0)
        #expect(try agent.ctl(["peer", "remove", peer]).status == 4)
        // "-" allows a peer without ever dialling it.
        #expect(try agent.ctl(["peer", "add", peer, "-"]).status == 0)
        let acceptOnly = try JSONValue.parse(try agent.ctl(["--json", "peers"]).stdout.trimmingCharacters(in: .newlines))
        guard case .array(let rows)? = acceptOnly.objectValue?["peers"], let row = rows.first?.objectValue else {
            Issue.record("no peers in \(acceptOnly)")
            return
        }
        #expect(row["address"] == JSONValue.null)
        #expect(try agent.ctl(["peer", "add", peer, "nowhere"]).status == 1)
    }
}
