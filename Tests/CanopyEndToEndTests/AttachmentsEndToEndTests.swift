import CanopyAgent
import CanopyCore
import CanopyStore
import Foundation
import Testing

/// Attachments through `canopyctl` and the admin socket of a real `canopyd`, as Tools/canopyd/README.md's
/// *Attachments* shows them.
@Suite("Attachments through canopyctl", .serialized)
struct AttachmentsEndToEndTests {
    /// `count` bytes that are not all alike, so a part sent twice or out of order shows.
    static func content(_ count: Int, seed: Int = 1) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: (($0 + seed) &* 2_654_435_761) >> 13) }
    }

    /// The names of the content files in the agent's attachment directory (none when it does not exist).
    static func storedFiles(_ agent: AgentProcess) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: agent.dataDir + "/attachments")) ?? []).sorted()
    }

    @Test("attach, get, attachment and detach: a file of several parts round-trips exactly, content attached twice is stored once, and a missing --rev or name is refused with exit 3 and 4")
    func roundTrip() throws {
        let agent = try AgentProcess()
        try agent.start()
        let file = agent.temporary.path + "/scan.pdf"
        let bytes = Self.content(5 << 20 + 123)
        try Data(bytes).write(to: URL(fileURLWithPath: file))

        let attached = try agent.ctl(["attach", "invoice-7", "scan", "--file", file])
        #expect(attached.status == 0, "\(attached.stderr)")
        #expect(attached.stdout.contains("scan: \(bytes.count) bytes, blake2b-"), "\(attached.stdout)")
        let got = try agent.ctl(["get", "invoice-7"])
        let document = try JSONValue.parse(Array(got.stdout.utf8)).objectValue
        let stub = try #require(document?["_attachments"]?.objectValue?["scan"]?.objectValue)
        #expect(stub["content_type"] == .string("application/pdf"), "the type follows the file's extension")
        #expect(stub["length"] == .int(Int64(bytes.count)) && stub["revpos"] == .int(1) && stub["stub"] == .bool(true))
        let rev = try #require(document?["_rev"]?.stringValue)

        let output = agent.temporary.path + "/copy.pdf"
        let read = try agent.ctl(["attachment", "invoice-7", "scan", "--output", output])
        #expect(read.status == 0, "\(read.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: output)) == Data(bytes))

        // Without --rev on a document that exists: a conflict, before any byte is sent.
        let again = try agent.ctl(["attach", "invoice-7", "scan2", "--file", file])
        #expect(again.status == 3 && again.stderr.contains("--rev"), "\(again.stderr)")
        // The same content on another document (and a text attachment next to it): stored once.
        let note = agent.temporary.path + "/note.txt"
        try "paid in full\n".write(toFile: note, atomically: true, encoding: .utf8)
        #expect(try agent.ctl(["attach", "invoice-8", "scan", "--file", file]).status == 0)
        let second = try agent.ctl(["attach", "invoice-7", "note", "--file", note, "--type", "text/plain", "--rev", rev])
        #expect(second.status == 0, "\(second.stderr)")
        #expect(Self.storedFiles(agent).count == 2, "\(Self.storedFiles(agent))")
        let text = try agent.ctl(["attachment", "invoice-7", "note"])
        #expect(text.status == 0 && text.stdout == "paid in full\n", "\(text.stdout) \(text.stderr)")
        // An older revision's attachment is still readable by --rev.
        #expect(try agent.ctl(["attachment", "invoice-7", "note", "--rev", rev]).status == 4)

        let current = try #require(try JSONValue.parse(Array(try agent.ctl(["get", "invoice-7"]).stdout.utf8)).objectValue?["_rev"]?.stringValue)
        let detached = try agent.ctl(["detach", "invoice-7", "scan", "--rev", current])
        #expect(detached.status == 0, "\(detached.stderr)")
        let missing = try agent.ctl(["attachment", "invoice-7", "scan"])
        #expect(missing.status == 4 && missing.stderr.contains("no attachment \"scan\""), "\(missing.stderr)")
        let stale = try agent.ctl(["detach", "invoice-7", "note", "--rev", current])
        #expect(stale.status == 3, "\(stale.stderr)")
        #expect(try agent.ctl(["attachment", "invoice-7", "scan", "--rev", current, "--output", output]).status == 0, "the revision before the detach still has it")
    }

    @Test("compact removes content only dropped revisions named and keeps what a current revision or another database names")
    func compaction() throws {
        let agent = try AgentProcess()
        try agent.start()
        let first = agent.temporary.path + "/v1.bin"
        let second = agent.temporary.path + "/v2.bin"
        try Data(Self.content(200_000, seed: 1)).write(to: URL(fileURLWithPath: first))
        try Data(Self.content(300_000, seed: 2)).write(to: URL(fileURLWithPath: second))
        #expect(try agent.ctl(["attach", "photo", "image", "--file", first]).status == 0)
        let rev = try #require(try agent.value(of: "photo", "_rev")?.stringValue)
        #expect(try agent.ctl(["attach", "photo", "image", "--file", second, "--rev", rev]).status == 0)
        #expect(try agent.ctl(["db", "create", "archive"]).status == 0)
        #expect(try agent.ctl(["attach", "old-photo", "image", "--file", first, "--db", "archive"]).status == 0)
        #expect(Self.storedFiles(agent).count == 2)

        // v1 is named by photo's old revision and by archive's document: kept.
        let kept = try agent.ctl(["compact"])
        #expect(kept.status == 0 && kept.stdout.contains("attachments: 0 removed"), "\(kept.stdout)\(kept.stderr)")
        #expect(Self.storedFiles(agent).count == 2)
        let archived = try #require(try agent.ctl(["get", "old-photo", "--db", "archive"]).stdout.split(separator: "\n").first)
        let archivedRev = try #require(try JSONValue.parse(Array(archived.utf8)).objectValue?["_rev"]?.stringValue)
        #expect(try agent.ctl(["detach", "old-photo", "image", "--db", "archive", "--rev", archivedRev]).status == 0)
        let removed = try agent.ctl(["compact", "--json"])
        let report = try JSONValue.parse(Array(removed.stdout.utf8)).objectValue
        #expect(report?["attachments_removed"] == .int(1) && report?["attachment_bytes_freed"] == .int(200_000), "\(removed.stdout)\(removed.stderr)")
        #expect(Self.storedFiles(agent).count == 1)
        let output = agent.temporary.path + "/out.bin"
        #expect(try agent.ctl(["attachment", "photo", "image", "--output", output]).status == 0)
        #expect(try Data(contentsOf: URL(fileURLWithPath: output)) == Data(Self.content(300_000, seed: 2)))
    }

    @Test("export --attachments writes content inline as CouchDB does; import stores it, so the same revisions and bytes arrive; CouchDB's own inline data imports; a stub without data is refused")
    func couchDBRoundTrip() throws {
        let a = try AgentProcess()
        try a.start()
        let file = a.temporary.path + "/scan.bin"
        let bytes = Self.content(1 << 20, seed: 5)
        try Data(bytes).write(to: URL(fileURLWithPath: file))
        #expect(try a.ctl(["attach", "invoice", "scan", "--file", file]).status == 0)
        let rev = try #require(try a.value(of: "invoice", "_rev"))

        let plain = try a.ctl(["export"])
        #expect(!plain.stdout.contains(#""data":"#), "without --attachments, stubs only")
        let exported = try a.ctl(["export", "--attachments"])
        #expect(exported.status == 0 && exported.stdout.contains(#""data":""#), "\(exported.stderr)")
        let dump = a.temporary.path + "/dump.json"
        try exported.stdout.write(toFile: dump, atomically: true, encoding: .utf8)

        let b = try AgentProcess()
        try b.start()
        let stubsOnly = a.temporary.path + "/stubs.json"
        try plain.stdout.write(toFile: stubsOnly, atomically: true, encoding: .utf8)
        let refused = try b.ctl(["import", stubsOnly])
        #expect(refused.status == 1 && refused.stderr.contains("scan"), "content it does not hold: \(refused.stderr)")
        #expect(refused.stderr.contains("canopyctl export --attachments"), "says how to make an export that imports: \(refused.stderr)")
        let imported = try b.ctl(["import", dump])
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(try b.value(of: "invoice", "_rev") == rev, "the same attachments give the same revision")
        let output = b.temporary.path + "/scan.bin"
        #expect(try b.ctl(["attachment", "invoice", "scan", "--output", output]).status == 0)
        #expect(try Data(contentsOf: URL(fileURLWithPath: output)) == Data(bytes))

        // As CouchDB writes it with attachments=true: an MD5 digest, and the content inline.
        let couch = b.temporary.path + "/couch.json"
        try #"""
            {"docs":[{"_id":"memo","_rev":"1-967a00dff5e02add41819138abb3284d","_revisions":{"start":1,"ids":["967a00dff5e02add41819138abb3284d"]},"title":"memo","_attachments":{"note.txt":{"content_type":"text/plain","revpos":1,"digest":"md5-XUFAKrxLKna5cZ2REBfFkg==","length":5,"data":"aGVsbG8="}}}],"new_edits":false}
            """#.write(toFile: couch, atomically: true, encoding: .utf8)
        let fromCouch = try b.ctl(["import", couch, "--couchdb"])
        #expect(fromCouch.status == 0, "\(fromCouch.stderr)")
        #expect(try b.ctl(["attachment", "memo", "note.txt"]).stdout == "hello")
        try #"""
            {"docs":[{"_id":"memo2","_rev":"1-967a00dff5e02add41819138abb3284d","_attachments":{"note.txt":{"content_type":"text/plain","revpos":1,"digest":"md5-XUFAKrxLKna5cZ2REBfFkg==","length":5,"stub":true}}}],"new_edits":false}
            """#.write(toFile: couch, atomically: true, encoding: .utf8)
        let stub = try b.ctl(["import", couch, "--couchdb"])
        #expect(stub.status == 1 && stub.stderr.contains("attachments=true"), "\(stub.stderr)")

        // Content too large for one admin line is refused inline, by name, not dropped.
        let large = a.temporary.path + "/large.bin"
        try Data(count: Int(DocumentStore.inlineAttachmentBytesMax) + 1).write(to: URL(fileURLWithPath: large))
        #expect(try a.ctl(["attach", "video", "clip", "--file", large]).status == 0)
        let tooLarge = try a.ctl(["export", "--attachments"])
        #expect(tooLarge.status == 1 && tooLarge.stderr.contains("\"clip\" of \"video\""), "\(tooLarge.stderr)")
    }

    @Test("attachment-size-limit refuses larger content before a byte is sent, and the connection goes on")
    func sizeLimit() throws {
        let agent = try AgentProcess()
        let config = agent.dataDir + "/canopy.conf"
        let original = try String(contentsOfFile: config, encoding: .utf8)
        try ("attachment-size-limit = 1000\n" + original).write(toFile: config, atomically: true, encoding: .utf8)
        try agent.start()
        let file = agent.temporary.path + "/big.bin"
        try Data(Self.content(1001)).write(to: URL(fileURLWithPath: file))
        let refused = try agent.ctl(["attach", "doc", "big", "--file", file])
        #expect(refused.status == 1 && refused.stderr.contains("at most 1000"), "\(refused.stderr)")
        #expect(Self.storedFiles(agent).allSatisfy { $0.hasPrefix("incoming-") == false } && Self.storedFiles(agent).isEmpty)

        let client = try agent.client()
        var sent = 0
        let response = try client.upload("attach", ["doc": .string("doc"), "name": .string("big")], length: 1001) { _ in
            sent += 1
            return 0
        }
        #expect(response["error"]?.objectValue?["code"] == .string("invalid_argument") && sent == 0, "\(response)")
        #expect(try client.request("status")["ok"] == .bool(true))
        try Data(Self.content(1000)).write(to: URL(fileURLWithPath: file))
        #expect(try agent.ctl(["attach", "doc", "big", "--file", file]).status == 0)

        // A new limit waits for a restart, and says so.
        try ("attachment-size-limit = 5000\n" + original).write(toFile: config, atomically: true, encoding: .utf8)
        let reload = try agent.ctl(["reload"])
        #expect(reload.status == 0 && reload.stdout.contains("attachment-size-limit"), "\(reload.stdout)")
    }

    @Test("an upload cut short stores nothing, and content damaged on disk is never sent whole: status, event and exit 1, no output file")
    func shortUploadAndDamagedContent() throws {
        let agent = try AgentProcess()
        try agent.start()
        let events = try agent.client()
        #expect(try events.request("events")["ok"] == .bool(true))

        let short = try agent.client()
        var calls = 0
        #expect(throws: AdminSocketClient.ClientError.self) {
            try short.upload("attach", ["doc": .string("doc"), "name": .string("part")], length: 3 << 20) { buffer in
                calls += 1
                guard calls == 1 else { return 0 }
                buffer.initializeMemory(as: UInt8.self, repeating: 7)
                return buffer.count
            }
        }
        try poll("the cut upload's temporary file to go") { Self.storedFiles(agent).isEmpty }
        #expect(try agent.value(of: "doc", "_rev") == nil)

        let file = agent.temporary.path + "/data.bin"
        let bytes = Self.content(3 << 20, seed: 9)
        try Data(bytes).write(to: URL(fileURLWithPath: file))
        #expect(try agent.ctl(["attach", "doc", "data", "--file", file]).status == 0)
        let sound = try agent.ctl(["check"])
        #expect(sound.status == 0 && sound.stdout.contains("1 attachment file (3.0 MiB) verified"), "\(sound.stdout) \(sound.stderr)")
        let stored = try #require(Self.storedFiles(agent).first)
        let handle = try #require(FileHandle(forWritingAtPath: agent.dataDir + "/attachments/" + stored))
        try handle.seek(toOffset: UInt64(bytes.count - 10))
        try handle.write(contentsOf: Data([bytes[bytes.count - 10] ^ 0xFF]))
        try handle.close()

        // `check` reads every named content whole, and names the damaged one.
        let checked = try agent.ctl(["check"])
        #expect(checked.status == 1 && checked.stdout.contains("attachment blake2b-\(stored): "), "\(checked.stdout) \(checked.stderr)")
        #expect(checked.stderr.contains("the node's data is damaged"), "\(checked.stderr)")
        let databasesOnly = try agent.ctl(["check", "--skip-attachments"])
        #expect(databasesOnly.status == 0 && !databasesOnly.stdout.contains("attachment"), "\(databasesOnly.stdout) \(databasesOnly.stderr)")

        let output = agent.temporary.path + "/out.bin"
        let read = try agent.ctl(["attachment", "doc", "data", "--output", output])
        #expect(read.status == 1 && read.stderr.contains("before the last byte"), "\(read.stderr)")
        #expect(!FileManager.default.fileExists(atPath: output))
        let status = try agent.client().request("status")
        #expect(status["damaged"] == .int(1), "\(status)")
        #expect(status["last_damage"]?.objectValue?["reason"]?.stringValue?.contains("attachment \"data\"") == true, "\(status)")
        var damaged: [String: JSONValue]?
        while damaged == nil {
            let line = try events.readObject()
            if line["event"]?.objectValue?["type"] == .string("document.damaged") { damaged = line["event"]?.objectValue?["data"]?.objectValue }
        }
        #expect(damaged?["doc"] == .string("doc"))
        // The connection that downloaded goes on with its next request after a good download.
        let client = try agent.client()
        var received: [UInt8] = []
        #expect(try client.download("attachment", ["doc": .string("doc"), "name": .string("missing")]) { received += $0 }["ok"] == .bool(false))
        #expect(try client.request("get", ["doc": .string("doc")])["ok"] == .bool(true))
    }
}
