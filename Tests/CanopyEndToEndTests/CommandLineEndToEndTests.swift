import CanopyCore
import Foundation
import Testing

/// canopyctl's answers to command lines it cannot carry out: each names what is wrong, and exits
/// with the status the exit code table of Tools/canopyctl/README.md gives it.
@Suite("canopyctl's answers to bad command lines, against a real agent", .serialized)
struct CommandLineEndToEndTests {
    /// The rows of the exit code table in Tools/canopyctl/README.md: code and meaning.
    static func exitCodeTable() throws -> [(code: Int32, meaning: String)] {
        let text = try String(contentsOf: ModuleSurfaceTests.root.appendingPathComponent("Tools/canopyctl/README.md"), encoding: .utf8)
        let section = try #require(text.range(of: "\n## Exit codes\n"), "Tools/canopyctl/README.md has no Exit codes section")
        let end = text.range(of: "\n## ", range: section.upperBound..<text.endIndex)?.lowerBound ?? text.endIndex
        return text[section.upperBound..<end].split(separator: "\n").compactMap { line in
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count == 2, let code = Int32(cells[0]) else { return nil }
            return (code, cells[1])
        }
    }

    @Test("the exit code table lists 0 to 6, each with the meaning these tests and CanopyctlTests check")
    func exitCodeTableIsTheOneChecked() throws {
        let table = try Self.exitCodeTable()
        #expect(table.map(\.code) == Array(0...6), "\(table)")
        let said = ["ok", "error", "usage", "conflict", "not found", "agent not reachable", "agent busy"]
        for (row, word) in zip(table, said) {
            #expect(row.meaning.hasPrefix(word), "exit \(row.code): \(row.meaning) does not start \"\(word)\"")
        }
    }

    @Test("a typo in a command or a group's command is named, with the nearest command, never blamed on the global options before it")
    func unknownCommands() throws {
        let agent = try AgentProcess()
        try agent.start()
        // `ctl` writes `--data-dir DIR` first, as the reader did.
        let peer = try agent.ctl(["peer", "ad", testNodeID(1), "127.0.0.1:9"])
        #expect(peer.status == 2)
        #expect(peer.stderr.contains("unknown command 'peer ad' (did you mean 'peer add'?); the peer commands are: add, remove, accept"), "\(peer.stderr)")
        #expect(!peer.stderr.contains("Unknown option"), "\(peer.stderr)")
        let top = try agent.ctl(["stauts"])
        #expect(top.status == 2)
        #expect(top.stderr.contains("unknown command 'stauts' (did you mean 'status'?); the commands are: status, peers"), "\(top.stderr)")
        let database = try agent.ctl(["db", "lst"])
        #expect(database.status == 2)
        #expect(database.stderr.contains("unknown command 'db lst' (did you mean 'db list'?)"), "\(database.stderr)")
        let bare = try agent.ctl(["db"])
        #expect(bare.status == 2)
        #expect(bare.stderr.contains("no command given after 'db'; the db commands are: list, create, delete, pending, dismiss"), "\(bare.stderr)")
        let far = try agent.ctl(["frobnicate"])
        #expect(far.status == 2 && !far.stderr.contains("did you mean"), "nothing is near: \(far.stderr)")
        #expect(try agent.ctl(["peer", "add", "--help"]).status == 0)
    }

    @Test("get of a deleted document exits 4 saying it is deleted and at which revision; get --rev of that revision prints it")
    func getOfDeletedDocument() throws {
        let agent = try AgentProcess()
        try agent.start()
        let first = try agent.put("gone", ["n": .int(1)])
        let deleted = try agent.ctl(["delete", "gone", "--rev", first])
        #expect(deleted.status == 0, "\(deleted.stderr)")
        let deletion = try #require(deleted.stdout.split(separator: " ").last?.trimmingCharacters(in: .whitespacesAndNewlines))
        let got = try agent.ctl(["get", "gone"])
        #expect(got.status == 4)
        #expect(got.stdout.isEmpty)
        #expect(got.stderr.contains(#"document "gone" is deleted (at revision \#(deletion); get --rev \#(deletion) prints the deletion)"#), "\(got.stderr)")
        let json = try agent.ctl(["--json", "get", "gone"])
        #expect(json.status == 4)
        let error = try JSONValue.parse(json.stdout.trimmingCharacters(in: .newlines)).objectValue?["error"]?.objectValue
        #expect(error?["code"] == .string("not_found") && error?["reason"] == .string("deleted") && error?["rev"] == .string(deletion), "\(json.stdout)")
        let asked = try agent.ctl(["get", "gone", "--rev", deletion])
        #expect(asked.status == 0, "\(asked.stderr)")
        #expect(asked.stdout.contains(#""_deleted":true"#), "\(asked.stdout)")
        #expect(try agent.ctl(["get", "gone", "--rev", first]).status == 0, "an older revision is still a revision")
    }

    @Test("a value outside an option's choices and a body the put rules refuse are usage errors, exit 2, before the agent is asked")
    func badValuesAreUsageErrors() throws {
        let agent = try AgentProcess()
        try agent.start()
        let direction = try agent.ctl(["peer", "add", testNodeID(2), "127.0.0.1:9", "--direction", "bpth"])
        #expect(direction.status == 2)
        #expect(direction.stderr.contains("'bpth'") && direction.stderr.contains("'push', 'pull' or 'both'"), "\(direction.stderr)")
        #expect(try agent.ctl(["peer", "add", testNodeID(2), "127.0.0.1:9", "--mode", "always"]).status == 2)
        #expect(try agent.ctl(["share", "default", testNodeID(2), "--access", "rw"]).status == 2)
        let special = try agent.ctl(["put", "d", "--body", #"{"_foo":1}"#])
        #expect(special.status == 2)
        #expect(special.stderr.contains(#"the body's top-level member "_foo" is not allowed"#), "\(special.stderr)")
        let array = try agent.ctl(["put", "d", "--body", "[1,2]"])
        #expect(array.status == 2)
        #expect(array.stderr.contains("the body must be a JSON object"), "\(array.stderr)")
        #expect(try agent.ctl(["peers"]).stdout.contains(testNodeID(2)) == false, "nothing was added")
        #expect(try agent.documentCount() == 0)
    }

    @Test("a negative --since or --limit is refused by name as a usage error")
    func negativeSequences() throws {
        let agent = try AgentProcess()
        try agent.start()
        let since = try agent.ctl(["changes", "--since", "-1"])
        #expect(since.status == 2)
        #expect(since.stderr.contains("--since must be a sequence number: 0 (from the start) or more, not -1"), "\(since.stderr)")
        #expect(!since.stderr.contains("Unknown option"), "\(since.stderr)")
        #expect(try agent.ctl(["changes", "--since=-5"]).stderr.contains("not -5"))
        #expect(try agent.ctl(["changes", "--limit", "0"]).status == 2)
        let events = try agent.ctl(["events", "--since", "-1"])
        #expect(events.status == 2)
        #expect(events.stderr.contains("--since must be an event sequence number: 0 or more, not -1"), "\(events.stderr)")
        #expect(try agent.ctl(["changes", "--since", "0"]).status == 0)
    }

    @Test("import of a CouchDB _all_docs response says what it is and how to make a _bulk_docs body of it; a refusal says its phrase once")
    func allDocsResponse() throws {
        let agent = try AgentProcess()
        try agent.start()
        let rows = (1...3).map { #"{"id":"d\#($0)","key":"d\#($0)","value":{"rev":"1-\#(String(repeating: "a", count: 32))"}}"# }
        let listing = #"{"total_rows":3,"offset":0,"rows":[\#(rows.joined(separator: ","))]}"#
        let path = agent.temporary.path + "/all_docs.json"
        try Data(listing.utf8).write(to: URL(fileURLWithPath: path))
        for arguments in [["import", path, "--couchdb"], ["import", "-", "--couchdb"]] {
            let refused = try agent.ctl(arguments, stdin: listing)
            #expect(refused.status == 2, "\(arguments)")
            #expect(refused.stderr.contains(#"it is a CouchDB _all_docs response ("total_rows")"#), "\(refused.stderr)")
            #expect(refused.stderr.contains("include_docs=true") && refused.stderr.contains("jq '{new_edits: false, docs: [.rows[].doc]}'"), "\(refused.stderr)")
            #expect(refused.stderr.components(separatedBy: "not a _bulk_docs body").count == 2, "the phrase once: \(refused.stderr)")
        }
        for (body, said) in [(#"{"x":1}"#, #"at byte 7: it has no "docs" array"#), (#"{"docs": {}}"#, #"at byte 9: "docs" must be an array"#)] {
            let other = try agent.ctl(["import", "-"], stdin: body)
            #expect(other.status == 2)
            #expect(other.stderr.contains("canopyctl: stdin: not a _bulk_docs body \(said)"), "\(other.stderr)")
            #expect(other.stderr.components(separatedBy: "not a _bulk_docs body").count == 2, "the phrase once: \(other.stderr)")
        }
        #expect(try agent.documentCount() == 0)
    }
}
