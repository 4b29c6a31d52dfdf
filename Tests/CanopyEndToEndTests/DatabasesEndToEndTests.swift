import CanopyAgent
import CanopyCore
import Foundation
import Testing

/// Several databases on one agent, driven through canopyctl as a user would: the `db` commands,
/// `--db` on the document commands, restarts, backups, and a data directory written before
/// there were several databases.
@Suite("databases on one agent, through canopyctl", .serialized)
struct DatabasesEndToEndTests {
    /// The JSON of a `--json` command's output.
    static func json(_ result: CommandResult) throws -> [String: JSONValue] {
        try #require(try JSONValue.parse(result.stdout.trimmingCharacters(in: .newlines)).objectValue, "\(result.stdout)")
    }

    @Test("db create, list and delete; every document command works on the database --db names and leaves default alone")
    func databaseCommands() throws {
        let agent = try AgentProcess()
        try agent.start()
        #expect(try agent.ctl(["db", "create", "team/notes", "--conflicts", "manual"]).stdout == "created database team/notes\n")
        #expect(try agent.ctl(["put", "d1", "--body", #"{"in":"default"}"#]).status == 0)

        let put = try agent.ctl(["put", "n1", "--db", "team/notes", "--body", #"{"in":"notes"}"#])
        #expect(put.status == 0, "\(put.stderr)")
        let got = try Self.json(try agent.ctl(["--json", "get", "n1", "--db", "team/notes"]))
        #expect(got["doc"]?.objectValue?["in"] == .string("notes"))
        let elsewhere = try agent.ctl(["get", "n1"])
        #expect(elsewhere.status == 4, "n1 is not in default: \(elsewhere.stdout)")

        // An export of default imported into the other database, and a conflict there kept by
        // its own setting (manual), then resolved with --db.
        let exported = try agent.ctl(["export"])
        #expect(try agent.ctl(["import", "-", "--db", "team/notes"], stdin: exported.stdout).status == 0)
        let leaves = #"{"new_edits":false,"docs":[{"_id":"c","_rev":"1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","s":"a"},{"_id":"c","_rev":"1-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","s":"b"}]}"#
        #expect(try agent.ctl(["import", "-", "--db", "team/notes"], stdin: leaves).status == 0)
        let conflicts = try agent.ctl(["conflicts", "--db", "team/notes"])
        #expect(conflicts.stdout.contains("1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), "\(conflicts.stdout)")
        #expect(try agent.ctl(["conflicts"]).stdout.split(separator: "\n").count == 1, "default has no conflicts: header only")
        #expect(try agent.ctl(["resolve", "c", "--db", "team/notes", "--pick", "1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]).status == 0)
        let changes = try agent.ctl(["changes", "--db", "team/notes"])
        #expect(changes.stdout.contains("n1") && changes.stdout.contains("d1") && changes.stdout.contains(" c "), "\(changes.stdout)")
        let notesExport = try agent.ctl(["export", "--db", "team/notes"])
        #expect(notesExport.stdout.contains(#""in":"notes""#) && notesExport.stdout.contains(#""in":"default""#))
        guard case .string(let rev)? = got["doc"]?.objectValue?["_rev"] else { throw TimedOut(what: "a _rev in \(got)") }
        #expect(try agent.ctl(["delete", "n1", "--db", "team/notes", "--rev", rev]).status == 0)

        // Columns mean what their headers say: team/notes holds d1 and c (n1 deleted), three
        // writes by import and resolve after n1's two.
        let list = try agent.ctl(["db", "list"])
        let lines = list.stdout.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ") }
        #expect(lines.first == "DATABASE DOCUMENTS UPDATE SEQ CONFLICTS DIGEST SHARED WITH", "\(list.stdout)")
        let defaultRow = lines.dropFirst().first?.split(separator: " ").map(String.init) ?? []
        #expect(defaultRow.count == 6 && defaultRow[0..<4] == ["default", "1", "1", "0"] && defaultRow[5] == "-", "\(list.stdout)")
        #expect(defaultRow.count == 6 && defaultRow[4].count == 16 && defaultRow[4].allSatisfy(\.isHexDigit), "\(list.stdout)")
        let notesRow = lines.dropFirst(2).first?.split(separator: " ").map(String.init) ?? []
        #expect(notesRow.count == 6 && notesRow[0..<2] == ["team/notes", "2"] && notesRow[3] == "0" && notesRow[5] == "-", "\(list.stdout)")

        // Refusals say what to do.
        let badName = try agent.ctl(["db", "create", "Team"])
        #expect(badName.status == 1 && badName.stderr.contains("starts with a lowercase letter"), "\(badName.stderr)")
        let missing = try agent.ctl(["put", "x", "--db", "nowhere", "--body", "{}"])
        #expect(missing.status == 4 && missing.stderr.contains("canopyctl db create nowhere"), "\(missing.stderr)")
        let unasked = try agent.ctl(["db", "delete", "team/notes"])
        #expect(unasked.status == 2 && unasked.stderr.contains("--yes"), "\(unasked.stderr)")
        #expect(try agent.ctl(["db", "delete", "default", "--yes"]).status == 1)

        // Document events name their database.
        let events = try agent.client()
        _ = try events.request("events", ["since": .int(0)])
        var databasesSeen: [String: String] = [:]
        while databasesSeen["n1"] == nil || databasesSeen["d1"] == nil {
            let event = try events.readObject()["event"]?.objectValue
            guard event?["type"] == .string("document.changed"), let data = event?["data"]?.objectValue,
                case .string(let doc)? = data["doc"], case .string(let db)? = data["db"]
            else { continue }
            databasesSeen[doc] = databasesSeen[doc] ?? db
        }
        #expect(databasesSeen == ["d1": "default", "n1": "team/notes"], "\(databasesSeen)")

        #expect(try agent.ctl(["db", "delete", "team/notes", "--yes"]).stdout == "deleted database team/notes\n")
        #expect(!FileManager.default.fileExists(atPath: agent.dataDir + "/databases/team%2Fnotes.sqlite"))
        #expect(try agent.ctl(["get", "d1"]).status == 0, "default untouched by the delete")
    }

    @Test("databases outlive a restart and go into backups; a listed database whose file is gone stops the agent, naming the file")
    func restartBackupAndMissingFile() throws {
        let agent = try AgentProcess()
        try agent.start()
        #expect(try agent.ctl(["db", "create", "archive", "--revs-limit", "20"]).status == 0)
        #expect(try agent.ctl(["put", "old", "--db", "archive", "--body", #"{"year":1999}"#]).status == 0)
        #expect(try agent.ctl(["shutdown"]).status == 0)
        // A rule written for the database by hand while the agent was down.
        let configPath = agent.dataDir + "/canopy.conf"
        let config = try String(contentsOfFile: configPath, encoding: .utf8)
        try (config + "\n[rule cards]\ndatabase = archive\nprefix = card:\nstrategy = local-wins\n")
            .write(toFile: configPath, atomically: true, encoding: .utf8)
        try agent.restart()
        #expect(try agent.ctl(["get", "old", "--db", "archive"]).stdout.contains("1999"))
        let listed = try Self.json(try agent.ctl(["--json", "db", "list"]))
        let archive = listed["databases"]?.arrayValue?.last?.objectValue
        #expect(archive?["db"] == .string("archive") && archive?["revs_limit"] == .int(20), "\(listed)")
        #expect(archive?["rules"] == .array([.object([
            "name": .string("cards"), "prefix": .string("card:"), "field": .null, "value": .null, "strategy": .string("local-wins"),
        ])]), "\(listed)")
        #expect(listed["databases"]?.arrayValue?.first?.objectValue?["rules"] == .array([]), "the rule is archive's alone")

        let backupPath = agent.temporary.path + "/backup"
        let backup = try Self.json(try agent.ctl(["--json", "backup", backupPath, "--with-identity"]))
        #expect(backup["databases"] == .int(2) && backup["documents"] == .int(1), "\(backup)")
        #expect(try agent.ctl(["check"]).status == 0)
        let restored = try AgentProcess(copying: backupPath)
        try restored.start()
        #expect(try restored.ctl(["get", "old", "--db", "archive"]).stdout.contains("1999"))

        #expect(try agent.ctl(["shutdown"]).status == 0)
        let file = agent.dataDir + "/databases/archive.sqlite"
        try FileManager.default.removeItem(atPath: file)
        let refused = try run(Binaries.canopyd, ["run", "--data-dir", agent.dataDir])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains(file) && refused.stderr.contains("[database archive]"), "\(refused.stderr)")
    }

    @Test("a data directory pair written before there were several databases starts as the default database: documents, conflict, local document and checkpoints kept")
    func previousReleaseDirectories() throws {
        let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/previous-release")
        let unpacked = TemporaryDirectory()
        let tar = try run("/bin/tar", ["xzf", fixtures.appendingPathComponent("previous-release.tar.gz").path, "-C", unpacked.path])
        #expect(tar.status == 0, "\(tar.stderr)")
        let a = try AgentProcess(copying: unpacked.path + "/a")
        let b = try AgentProcess(copying: unpacked.path + "/b")
        try a.start()
        try b.start()

        let expected = try String(contentsOf: fixtures.appendingPathComponent("a-export.json"), encoding: .utf8)
        #expect(try a.ctl(["export"]).stdout == expected, "every revision of the old file, as the old release exported it")
        #expect(try a.ctl(["get", "_local/settings"]).stdout.contains(#""theme":"dark""#))
        for agent in [a, b] {
            let conflicts = try agent.ctl(["conflicts"])
            #expect(conflicts.stdout.contains("2-ec8066aae6e1c3d49895e12c1b250eb1") && conflicts.stdout.contains("2-4b2700d285128b6628ac7f6c696a03bd"), "\(conflicts.stdout)")
            let list = try Self.json(try agent.ctl(["--json", "db", "list"]))
            #expect(list["databases"]?.arrayValue?.map { $0.objectValue?["db"] } == [.string("default")], "\(list)")
        }

        // The peers' addresses changed (new ports); their checkpoints did not: a sync resumes
        // where the old release left off and has nothing to check.
        for (agent, other) in [(a, b), (b, a)] {
            #expect(try agent.ctl(["peer", "add", other.nodeID, try other.listenAddress(), "--mode", "once"]).status == 0)
        }
        let synced = try Self.json(try a.ctl(["--json", "sync", b.nodeID, "--wait", "--timeout", "60"]))
        #expect(synced["completed"] == .int(0), "checkpoints kept: \(synced)")
        let peers = try Self.json(try a.ctl(["--json", "peers"]))
        let row = peers["peers"]?.arrayValue?.first?.objectValue
        #expect(row?["last_pulled_seq"] == .int(5) && row?["last_pushed_seq"] == .int(5), "\(peers)")
    }
}
