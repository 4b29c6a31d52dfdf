import CanopyAgent
import CanopyCore
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What a user types reaches the store unchanged or is refused with a message naming the problem;
/// the tools' answers say what happened.
@Suite("user input and messages, against real agents", .serialized)
struct UserInputEndToEndTests {
    /// Sends one raw request line and returns the response object.
    private func rawRequest(_ agent: AgentProcess, _ line: String) throws -> [String: JSONValue] {
        let client = try agent.client()
        try client.sendLine(Array(line.utf8))
        return try client.readObject()
    }

    private func errorCode(_ response: [String: JSONValue]) -> String? {
        guard case .string(let code)? = response["error"]?.objectValue?["code"] else { return nil }
        return code
    }

    private func errorMessage(_ response: [String: JSONValue]) -> String {
        guard case .string(let message)? = response["error"]?.objectValue?["message"] else { return "" }
        return message
    }

    @Test("canopyctl shutdown returns once the agent has exited, so canopyd run on the same directory starts at once")
    func shutdownWaitsForExit() throws {
        let agent = try AgentProcess()
        try agent.start()
        let old = agent.process
        let stopped = try agent.ctl(["shutdown"])
        #expect(stopped.status == 0, "\(stopped.stderr)")
        #expect(stopped.stdout == "stopped\n")
        // The lock is free only once the kernel has closed the process's files on its exit; the
        // parent's reaping (which `isRunning` reports) follows a moment later.
        try poll("canopyd to be reaped after canopyctl shutdown returned", limitSeconds: 2) { !old.isRunning }
        try agent.restart()
        #expect(try agent.documentCount() == 0)
        #expect(agent.process.isRunning, "the new canopyd exited: \(agent.log)")
        #expect(!agent.log.contains("already running"))
        #expect(try agent.ctl(["--json", "shutdown"]).stdout.contains("lock_path"))
    }

    @Test("reload names the changed settings that wait for a restart, in its reply, its output and its event, and applies conflicts at once")
    func reloadSaysWhatNeedsRestart() throws {
        let agent = try AgentProcess()
        let configPath = agent.dataDir + "/canopy.conf"
        let original = try String(contentsOfFile: configPath, encoding: .utf8)
        #expect(!original.contains("applies changes without a restart"))
        #expect(original.contains("listen and revs-limit take effect when canopyd restarts"))
        try agent.start()
        #expect(try agent.ctl(["reload"]).stdout == "reloaded\n")

        let events = try agent.client()
        _ = try events.request("events")
        let edited = original.split(separator: "\n", omittingEmptySubsequences: false).map { line -> String in
            if line.hasPrefix("listen =") { return "listen = 127.0.0.1:9" }
            if line.hasPrefix("revs-limit =") { return "revs-limit = 50" }
            if line.hasPrefix("conflicts =") { return "conflicts = manual" }
            return String(line)
        }.joined(separator: "\n")
        try edited.write(toFile: configPath, atomically: true, encoding: .utf8)
        let reload = try agent.ctl(["reload"])
        #expect(reload.status == 0, "\(reload.stderr)")
        #expect(reload.stdout == "reloaded; restart canopyd to apply: listen, revs-limit\n")
        let json = try JSONValue.parse(try agent.ctl(["--json", "reload"]).stdout.trimmingCharacters(in: .newlines))
        #expect(json.objectValue?["restart_required"] == .array([.string("listen"), .string("revs-limit")]))
        var reloaded: [String: JSONValue]?
        while reloaded == nil {
            let line = try events.readObject()
            if let event = line["event"]?.objectValue, event["type"] == .string("config.reloaded") { reloaded = event["data"]?.objectValue }
        }
        #expect(reloaded?["restart_required"] == .array([.string("listen"), .string("revs-limit")]))
        // The conflict setting applies at once; the listener is kept until the restart.
        let status = try agent.client().request("status")
        #expect(status["conflicts"] == .string("manual"))
        #expect(status["listen"] != .string("127.0.0.1:9"))
    }

    @Test("a body with a duplicate member name is refused naming the name, from canopyctl, the socket and import")
    func duplicateMembersAreRefused() throws {
        let agent = try AgentProcess()
        try agent.start()
        let put = try agent.ctl(["put", "d", "--body", #"{"a":1,"a":2}"#])
        #expect(put.status == 2)
        #expect(put.stderr.contains(#"duplicate member name "a""#), "\(put.stderr)")
        let raw = try rawRequest(agent, #"{"id":5,"cmd":"put","doc":"d","body":{"x":{"k":1,"k":2}}}"#)
        #expect(raw["id"] == .int(5))
        #expect(errorCode(raw) == "invalid_argument")
        #expect(errorMessage(raw).contains(#""k""#))
        // The file streams to the agent, which refuses the entry (exit 1, as any entry it refuses).
        let imported = try agent.ctl(["import", "-"], stdin: #"{"docs":[{"_id":"i","_rev":"1-aa","v":1,"v":2}],"new_edits":false}"#)
        #expect(imported.status == 1)
        #expect(imported.stderr.contains(#""v""#))
        #expect(try agent.documentCount() == 0)
    }

    @Test("a number that would be stored with other digits or not at all is refused with the number in the message")
    func numbersAreNeverRounded() throws {
        let agent = try AgentProcess()
        try agent.start()
        let big = try agent.ctl(["put", "d", "--body", #"{"n":12345678901234567890}"#])
        #expect(big.status == 2)
        #expect(big.stderr.contains("12345678901234567890") && big.stderr.contains("string"), "\(big.stderr)")
        let raw = try rawRequest(agent, #"{"id":6,"cmd":"put","doc":"d","body":{"n":-9223372036854775809}}"#)
        #expect(errorCode(raw) == "invalid_argument")
        #expect(errorMessage(raw).contains("-9223372036854775809"))
        let huge = try agent.ctl(["put", "d", "--body", #"{"x":1e400}"#])
        #expect(huge.status == 2)
        #expect(huge.stderr.contains("number 1e400 is out of range"), "\(huge.stderr)")
        #expect(!huge.stderr.contains("DecodingError"))
        let hugeRaw = try rawRequest(agent, #"{"id":7,"cmd":"put","doc":"d","body":{"x":1e400}}"#)
        #expect(errorMessage(hugeRaw).contains("number 1e400 is out of range"))
        // What fits is kept exactly.
        #expect(try agent.ctl(["put", "d", "--body", #"{"n":9223372036854775807,"e":100000000000000000000}"#]).status == 0)
        #expect(try agent.value(of: "d", "n") == .int(.max))
        #expect(try agent.ctl(["get", "d"]).stdout.contains(#""e":100000000000000000000"#))
        #expect(try agent.documentCount() == 1)
    }

    @Test("_id and _rev in a body must agree with the command, and other _ members are refused as usage errors")
    func specialMembers() throws {
        let agent = try AgentProcess()
        try agent.start()
        let wrongID = try agent.ctl(["put", "d", "--body", #"{"_id":"e","x":1}"#])
        #expect(wrongID.status == 2, "a body the put rules refuse is a usage error")
        #expect(wrongID.stderr.contains(#"_id "e" is not the document id "d""#), "\(wrongID.stderr)")
        let created = try agent.ctl(["put", "d", "--body", #"{"_id":"d","x":1}"#])
        #expect(created.status == 0, "\(created.stderr)")
        let rev = created.stdout.split(separator: " ").last.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) } ?? ""
        // `_rev` in the body is the revision replaced.
        let updated = try agent.ctl(["put", "d", "--body", #"{"_rev":"\#(rev)","x":2}"#])
        #expect(updated.status == 0, "\(updated.stderr)")
        #expect(try agent.value(of: "d", "x") == .int(2))
        #expect(try agent.client().request("get", ["doc": .string("d")])["doc"]?.objectValue?["_id"] == .string("d"))
        let disagree = try agent.ctl(["put", "d", "--rev", rev, "--body", #"{"_rev":"2-00000000000000000000000000000000"}"#])
        #expect(disagree.status == 2)
        #expect(disagree.stderr.contains("differ"))
        let special = try agent.ctl(["put", "d", "--rev", "2-00000000000000000000000000000000", "--body", #"{"_foo":1}"#])
        #expect(special.status == 2)
        #expect(special.stderr.contains(#""_foo" is not allowed"#), "\(special.stderr)")
        // `_attachments` is kept, but only as stubs of content this node holds.
        guard case .string(let current)? = try agent.value(of: "d", "_rev") else {
            Issue.record("d has no _rev")
            return
        }
        let stub = #"{"_attachments":{"a":{"content_type":"text/plain","digest":"blake2b-\#(String(repeating: "0", count: 64))","length":1,"revpos":3,"stub":true}}}"#
        let missing = try agent.ctl(["put", "d", "--rev", current, "--body", stub])
        #expect(missing.status == 1 && missing.stderr.contains("blake2b-"), "\(missing.stderr)")
    }

    @Test("a _local/ document is stored on its node only: get and delete reach it, and it never replicates")
    func localDocumentsStayLocal() throws {
        let a = try AgentProcess()
        let b = try AgentProcess()
        try a.start()
        try b.start()
        let put = try a.ctl(["put", "_local/settings", "--body", #"{"theme":"dark"}"#])
        #expect(put.status == 0, "\(put.stderr)")
        #expect(put.stdout.contains("local document"))
        #expect(try a.value(of: "_local/settings", "theme") == .string("dark"))
        #expect(try a.documentCount() == 0)
        #expect(try a.ctl(["put", "_local/settings", "--rev", "1-00000000000000000000000000000000", "--body", "{}"]).status == 1)
        try a.put("marker", ["n": .int(1)])
        try a.allow(b)
        try b.allow(a)
        try poll("the marker on b") { try b.value(of: "marker", "n") == .int(1) }
        #expect(try b.ctl(["get", "_local/settings"]).status == 4)
        #expect(try b.documentCount() == 1)
        let changes = try a.ctl(["--json", "changes"])
        #expect(!changes.stdout.contains("_local"))
        let imported = try a.ctl(["import", "-"], stdin: #"{"docs":[{"_id":"_local/x","_rev":"1-aa","v":1}],"new_edits":false}"#)
        #expect(imported.status == 1)
        #expect(imported.stderr.contains("_local/ document, which is not imported"), "\(imported.stderr)")
        #expect(try a.ctl(["delete", "_local/settings"]).status == 0)
        let gone = try a.ctl(["get", "_local/settings"])
        #expect(gone.status == 4)
        #expect(gone.stderr.contains("local document"))
    }

    @Test("resolve on a document without a conflict says so, with its own error code and exit 1")
    func resolveWithoutConflict() throws {
        let agent = try AgentProcess()
        try agent.start()
        let rev = try agent.put("d", ["x": .int(1)])
        let resolve = try agent.ctl(["resolve", "d", "--pick", rev])
        #expect(resolve.status == 1)
        #expect(resolve.stderr.contains(#"document "d" is not conflicted"#), "\(resolve.stderr)")
        let json = try agent.ctl(["--json", "resolve", "d", "--pick", rev])
        #expect(json.stdout.contains(#""code":"not_conflicted""#))
        #expect(try agent.ctl(["resolve", "missing", "--pick", rev]).status == 4)
    }

    @Test("a resolution's merged body follows the put rules for _ members, refused as usage errors")
    func resolutionBodyMembers() throws {
        let agent = try AgentProcess(initArguments: ["--listen", "127.0.0.1:0", "--conflicts", "manual"])
        try agent.start()
        let leaves = ["a", "b"].map { #"{"_id":"c","_rev":"1-\#(String(repeating: $0, count: 32))","side":"\#($0)"}"# }
        #expect(try agent.ctl(["import", "-"], stdin: #"{"docs":[\#(leaves.joined(separator: ","))],"new_edits":false}"#).status == 0)
        let special = try agent.ctl(["resolve", "c", "--body", #"{"_deleted":true}"#])
        #expect(special.status == 2)
        #expect(special.stderr.contains(#""_deleted" is not allowed; to delete a document use delete"#), "\(special.stderr)")
        let withRev = try agent.ctl(["resolve", "c", "--body", #"{"_rev":"1-\#(String(repeating: "a", count: 32))"}"#])
        #expect(withRev.status == 2)
        #expect(withRev.stderr.contains("remove _rev"))
        let merged = try agent.ctl(["resolve", "c", "--body", #"{"_id":"c","side":"both"}"#])
        #expect(merged.status == 0, "\(merged.stderr)")
        #expect(try agent.value(of: "c", "side") == .string("both"))
    }

    @Test("a read-only database file is reported in words that name it, with SQLite's code kept")
    func readOnlyDatabase() throws {
        let agent = try AgentProcess()
        let database = agent.dataDir + "/canopy.sqlite"
        // Root ignores file modes; the immutable flag binds it too (where the file system has it).
        let immutable = getuid() == 0
        if immutable {
            guard FileManager.default.isExecutableFile(atPath: "/usr/bin/chattr"),
                try run("/usr/bin/chattr", ["+i", database]).status == 0
            else { return }
        } else {
            chmod(database, 0o444)
        }
        defer { if immutable { _ = try? run("/usr/bin/chattr", ["-i", database]) } }
        let started = try run(Binaries.canopyd, ["run", "--data-dir", agent.dataDir])
        #expect(started.status == 1)
        #expect(started.stderr.contains("the database file \(database) is read-only; check its permissions"), "\(started.stderr)")
        #expect(started.stderr.contains("SQLite error 8"))
    }

    @Test("stats prints each counter and its value apart, however long the name")
    func statsColumns() throws {
        let agent = try AgentProcess()
        try agent.start()
        let stats = try agent.ctl(["stats"])
        #expect(stats.status == 0)
        let names = stats.stdout.split(separator: "\n").dropFirst().map { $0.split(separator: " ").first.map(String.init) ?? "" }
        #expect(names.contains("peer_bytes_received"), "\(stats.stdout)")
        #expect(names.contains("doc_count"))
    }

    @Test("an unknown command or none at all is a usage error that lists the commands, for both tools")
    func usageErrors() throws {
        let agent = try AgentProcess()
        let unknown = try agent.ctl(["frob"])
        #expect(unknown.status == 2)
        #expect(unknown.stderr.contains("unknown command 'frob'"), "\(unknown.stderr)")
        #expect(unknown.stderr.contains("status, peers"))
        #expect(!unknown.stderr.contains("Unknown option"))
        let onlyOptions = try agent.ctl([])
        #expect(onlyOptions.status == 2)
        #expect(onlyOptions.stderr.contains("no command given"))
        for binary in [Binaries.canopyctl, Binaries.canopyd] {
            let bare = try run(binary, [])
            #expect(bare.status == 2, "\(binary)")
            #expect(bare.stderr.contains("USAGE"), "\(binary): \(bare.stderr)")
            #expect(bare.stdout.isEmpty)
        }
        let unknownAgentCommand = try run(Binaries.canopyd, ["frob"])
        #expect(unknownAgentCommand.status == 2)
        #expect(unknownAgentCommand.stderr.contains("unknown command 'frob'; the commands are: init, id, run"))
        // Global options before a known command still work.
        #expect(try agent.ctl(["status"]).status == 5)
    }
}
