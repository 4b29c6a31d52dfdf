import CanopyAgent
import CanopyCore
import CanopyStore
import Foundation
import Testing

/// Realistic uses of every admin command against real `canopyd` processes, each request through
/// a `RecordingClient`: A (automatic conflicts), B (manual conflicts) and C (a node A does not
/// know). What each scenario asserts is what a client relies on; what the spec lists is checked
/// afterwards, from the recording (`AdminConformanceTests`).
struct AdminConformanceScenarios {
    let coverage: AdminCoverage
    let a: AgentProcess
    let b: AgentProcess
    let c: AgentProcess

    init(coverage: AdminCoverage) throws {
        self.coverage = coverage
        a = try AgentProcess()
        b = try AgentProcess(initArguments: ["--listen", "127.0.0.1:0", "--conflicts", "manual"])
        c = try AgentProcess()
        for agent in [a, b, c] { try agent.start() }
    }

    func client(_ agent: AgentProcess) throws -> RecordingClient { try RecordingClient(agent, coverage) }

    /// Every scenario, shutdown last.
    func run() throws {
        try documents()
        try databases()
        try malformedRequests()
        try importExportRoundTrip()
        try attachments()
        try resolveByCommand()
        try exportSplitsALargeDocument()
        try bulkWrites()
        try backup()
        try replicationWithConflicts()
        try pendingPeer()
        try syncFailsWhenThePeerIsRemoved()
        try reload()
        try busyAtTheConnectionLimit()
        try eventsAndShutdown()
    }

    /// put, get, delete, changes, stats and status on A, local documents included.
    func documents() throws {
        let a = try client(self.a)
        let created = try a.request("put", ["doc": .string("d1"), "body": .object(["n": .int(1)])])
        let rev1 = try #require(created["rev"])
        let updated = try a.request("put", ["doc": .string("d1"), "body": .object(["n": .int(2)]), "rev": rev1])
        let rev2 = try #require(updated["rev"])
        #expect(errorCode(of: try a.request("put", ["doc": .string("d1"), "body": .object([:]), "rev": rev1])) == "conflict")
        let got = try a.request("get", ["doc": .string("d1"), "rev": rev2, "revs": .bool(true), "conflicts": .bool(true)])
        #expect(got["doc"]?.objectValue?["_revisions"]?.objectValue?["start"] == .int(2), "\(got)")
        #expect(errorCode(of: try a.request("get", ["doc": .string("missing")])) == "not_found")
        #expect(try a.request("put", ["doc": .string("_local/settings"), "body": .object(["k": .int(1)])])["local"] == .bool(true))
        #expect(try a.request("get", ["doc": .string("_local/settings")])["doc"]?.objectValue?["k"] == .int(1))
        #expect(try a.request("delete", ["doc": .string("_local/settings")])["local"] == .bool(true))
        let deleted = try a.request("delete", ["doc": .string("d1"), "rev": rev2])
        #expect(deleted["ok"] == .bool(true), "\(deleted)")
        let changes = try a.request("changes", ["since": .int(0), "limit": .int(10)])
        #expect(changes["results"]?.arrayValue?.first?.objectValue?["deleted"] == .bool(true), "\(changes)")
        let stats = try a.request("stats")
        #expect(stats["update_seq"] == changes["last_seq"], "\(stats)")
        #expect(try a.request("status")["node_id"] == .string(self.a.nodeID))
    }

    /// attach, attachment, detach and compact on C, in a database of their own: content of more
    /// than one part streamed both ways, `get` showing the stub, a missing `rev` and a detached
    /// name refused, and the content only old revisions named removed by compaction.
    func attachments() throws {
        let c = try client(self.c)
        #expect(try c.request("db.create", ["name": .string("files")])["ok"] == .bool(true))
        let content = (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: ($0 &* 2_654_435_761) >> 13) }
        let report: [String: JSONValue] = ["db": .string("files"), "doc": .string("report"), "name": .string("data.bin")]
        var arguments = report
        arguments["content_type"] = .string("application/x-test")
        let attached = try c.upload("attach", arguments, content)
        #expect(attached["length"] == .int(Int64(content.count)), "\(attached)")
        #expect(errorCode(of: try c.upload("attach", report, [1, 2, 3])) == "conflict", "the document exists: attach needs its rev")
        var notes = report
        notes["name"] = .string("notes.txt")
        notes["rev"] = try #require(attached["rev"])
        let rev = try #require(try c.upload("attach", notes, Array("checked\n".utf8))["rev"])
        var received: [UInt8] = []
        var named = report
        named["rev"] = rev
        let sent = try c.download("attachment", named, into: &received)
        #expect(sent["digest"] == attached["digest"] && sent["content_type"] == .string("application/x-test"), "\(sent)")
        #expect(received == content)
        let stub = try c.request("get", ["db": .string("files"), "doc": .string("report")])["doc"]?.objectValue?["_attachments"]?.objectValue?["data.bin"]
        #expect(stub?.objectValue?["stub"] == .bool(true) && stub?.objectValue?["digest"] == attached["digest"], "\(String(describing: stub))")
        let inline = try c.request("export", ["db": .string("files"), "attachments": .bool(true)])
        let entry = inline["docs"]?.arrayValue?.last?.objectValue?["_attachments"]?.objectValue?["notes.txt"]?.objectValue
        #expect(entry?["data"] == .string("Y2hlY2tlZAo="), "export with attachments: true carries the content inline: \(String(describing: entry))")
        let detached = try c.request("detach", named)
        named["rev"] = detached["rev"]
        #expect(errorCode(of: try c.request("detach", named)) == "not_found")
        #expect(errorCode(of: try c.download("attachment", named, into: &received)) == "not_found")
        // Only the revisions before the detach named data.bin: their bodies go, then its content.
        let compacted = try c.request("compact", ["db": .string("files")])
        #expect(compacted["databases"] == .array([.string("files")]) && compacted["attachments_removed"] == .int(1), "\(compacted)")
        #expect(compacted["attachment_bytes_freed"] == .int(Int64(content.count)) && compacted["attachments_kept"] == .int(1), "\(compacted)")
    }

    /// db.create, db.list and db.delete on A, and every document command on a database other
    /// than `default`, which stays untouched; then the database is kept for `backup` and `check`.
    func databases() throws {
        let a = try client(self.a)
        let created = try a.request("db.create", ["name": .string("team/notes"), "revs_limit": .int(50), "conflicts": .string("manual")])
        #expect(created["db"] == .string("team/notes") && created["revs_limit"] == .int(50) && created["conflicts"] == .string("manual"), "\(created)")
        #expect(errorCode(of: try a.request("db.create", ["name": .string("team/notes")])) == "conflict")
        #expect(errorCode(of: try a.request("db.create", ["name": .string("Notes")])) == "invalid_argument")
        #expect(errorCode(of: try a.request("get", ["doc": .string("x"), "db": .string("nowhere")])) == "not_found")
        let db: JSONValue = .string("team/notes")
        let before = try a.request("stats")["update_seq"]
        let put = try a.request("put", ["doc": .string("n1"), "body": .object(["t": .string("one")]), "db": db])
        let rev = try #require(put["rev"])
        #expect(try a.request("get", ["doc": .string("n1"), "db": db])["doc"]?.objectValue?["t"] == .string("one"))
        #expect(errorCode(of: try a.request("get", ["doc": .string("n1")])) == "not_found", "documents stay in their database")
        _ = try a.request("bulk_docs", ["docs": .array([.object(["_id": .string("n2"), "v": .int(2)])]), "db": db])
        _ = try a.request("import", ["docs": .array(Self.conflictingLeaves("n3")), "new_edits": .bool(false), "db": db])
        let conflicts = try a.request("conflicts", ["db": db])
        #expect(conflicts["conflicts"]?.arrayValue?.count == 1, "the database's own setting (manual) keeps the conflict: \(conflicts)")
        if let row = conflicts["conflicts"]?.arrayValue?.first?.objectValue, let loser = row["conflicts"]?.arrayValue?.first {
            _ = try a.request("resolve", ["doc": .string("n3"), "pick": loser, "db": db])
        }
        #expect(try a.request("delete", ["doc": .string("n1"), "rev": rev, "db": db])["ok"] == .bool(true))
        let changes = try a.request("changes", ["db": db])
        #expect(changes["results"]?.arrayValue?.count == 3, "\(changes)")
        let exported = try a.request("export", ["db": db])
        #expect(exported["docs"]?.arrayValue?.isEmpty == false && exported["done"] == .bool(true), "\(exported)")
        #expect(try a.request("stats")["update_seq"] == before, "default is untouched")
        let list = try a.request("db.list")
        let rows = list["databases"]?.arrayValue?.compactMap(\.objectValue) ?? []
        #expect(rows.map { $0["db"] } == [.string("default"), .string("team/notes")], "\(list)")
        #expect(rows.last?["doc_count"] == .int(2) && rows.last?["revs_limit"] == .int(50), "\(list)")
        _ = try a.request("db.create", ["name": .string("scratch")])
        #expect(try a.request("db.delete", ["name": .string("scratch")])["deleted"] == .bool(true))
        #expect(errorCode(of: try a.request("db.delete", ["name": .string("default")])) == "invalid_argument")
        #expect(errorCode(of: try a.request("db.delete", ["name": .string("scratch")])) == "not_found")
    }

    /// Lines that are not requests, unknown commands, bad arguments, an over-long line.
    func malformedRequests() throws {
        let a = try client(self.a)
        let cases: [(String, String)] = [
            ("not json", "parse_error"),
            (#"["status"]"#, "invalid_request"),
            (#"{"id":"one","cmd":"status"}"#, "invalid_request"),
            (#"{"id":1}"#, "invalid_request"),
            (#"{"id":2,"cmd":"frobnicate"}"#, "unknown_command"),
            (#"{"id":3,"cmd":"get"}"#, "invalid_argument"),
            (#"{"id":4,"cmd":"changes","limit":100001}"#, "invalid_argument"),
            (#"{"id":5,"cmd":"put","doc":"x","body":{"n":1,"n":2}}"#, "invalid_argument"),
            (#"{"id":6,"cmd":"put","doc":"x","body":{"n":12345678901234567890}}"#, "invalid_argument"),
        ]
        for (line, code) in cases {
            #expect(errorCode(of: try a.raw(line)) == code, "\(line)")
        }
        let long = try client(self.a)
        let huge = #"{"id":7,"cmd":"put","doc":"x","body":{"s":""# + String(repeating: "a", count: AgentLimits.adminLineBytesMax) + #""}}"#
        #expect(errorCode(of: try long.raw(huge)) == "line_too_long")
        #expect(long.readUntilClosed(), "the connection stays open after line_too_long")
    }

    /// C with every admin connection slot held by an `events` stream: one more client sits on an
    /// operator slot, where `status` is answered and any other command is `busy` (its `id`
    /// echoed) and closes the connection; once a general slot is free C serves everything again.
    func busyAtTheConnectionLimit() throws {
        // Clients of earlier scenarios close asynchronously: wait until C counts only the asking one.
        try poll("C to count one admin client") { try client(self.c).request("stats")["admin_clients"] == .int(1) }
        var held: [RecordingClient] = []
        for _ in 0..<AgentLimits.adminConnectionsMax {
            let client = try client(self.c)
            #expect(try client.request("events")["ok"] == .bool(true))
            held.append(client)
        }
        let over = try client(self.c)
        #expect(try over.request("status")["ok"] == .bool(true))
        let busy = try over.request("get", ["doc": .string("anything")])
        #expect(errorCode(of: busy) == "busy", "\(busy)")
        #expect(busy["id"] != .null, "\(busy)")
        #expect(over.readUntilClosed(), "the connection is closed after busy")
        held.removeAll()
        try poll("C to serve again") { errorCode(of: try client(self.c).request("get", ["doc": .string("anything")])) == "not_found" }
    }

    /// export in pages from A, import into C, and C exports the same documents.
    func importExportRoundTrip() throws {
        let a = try client(self.a)
        let couch = #"""
            {"docs":[{"_id":"settled","_rev":"2-aab3238922bcc25a6f606eb525ffdc56","_revisions":{"start":2,"ids":["aab3238922bcc25a6f606eb525ffdc56","c4ca4238a0b923820dcc509a6f75849b"]},"side":"winner"},
            {"_id":"settled","_rev":"3-9bf31c7ff062936a96d3c8bd1f8f2ff3","_deleted":true,"_revisions":{"start":3,"ids":["9bf31c7ff062936a96d3c8bd1f8f2ff3","c74d97b01eae257e44aa9d5bade97baf","c4ca4238a0b923820dcc509a6f75849b"]}}]}
            """#
        let docs = try #require(JSONValue.parse(Data(couch.utf8)).objectValue?["docs"])
        let imported = try a.request("import", ["docs": docs, "couchdb": .bool(true), "new_edits": .bool(false), "conflicts": .string("keep")])
        #expect(imported["revisions_added"] == .int(4), "\(imported)")
        for index in 0..<3 { _ = try a.request("put", ["doc": .string("page-\(index)"), "body": .object(["i": .int(Int64(index))])]) }
        let exported = try exportAll(a)
        let c = try client(self.c)
        #expect(try c.request("import", ["docs": .array(exported)])["ok"] == .bool(true))
        #expect(Self.sorted(try exportAll(c)) == Self.sorted(exported))
    }

    /// Every page of an export after `since`, two documents a page; a page that ends inside a
    /// document is followed by one that skips the leaves already received.
    func exportAll(_ client: RecordingClient, since start: Int64 = 0) throws -> [JSONValue] {
        var docs: [JSONValue] = []
        var arguments: [String: JSONValue] = ["since": .int(start), "limit": .int(2)]
        while true {
            let page = try client.request("export", arguments)
            docs += page["docs"]?.arrayValue ?? []
            arguments["since"] = try #require(page["last_seq"])
            arguments["skip_leaves"] = page["next_leaf"]
            if page["done"] != .bool(false) { return docs }
        }
    }

    /// A document whose two open leaves are together larger than an export page is split across
    /// two pages, and arrives whole (on B, whose manual policy keeps both leaves).
    func exportSplitsALargeDocument() throws {
        let b = try client(self.b)
        guard case .int(let before)? = try b.request("stats")["update_seq"] else {
            Issue.record("no update_seq")
            return
        }
        let large = String(repeating: "x", count: AgentLimits.exportPageBytesMax * 5 / 8)
        let leaves = Self.conflictingLeaves("large").map { leaf in
            JSONValue.object((leaf.objectValue ?? [:]).merging(["text": .string(large)]) { $1 })
        }
        #expect(try b.request("import", ["docs": .array(leaves)])["ok"] == .bool(true))
        let first = try b.request("export", ["since": .int(before), "limit": .int(1)])
        #expect(first["next_leaf"] == .int(1) && first["docs"]?.arrayValue?.count == 1, "\(first["next_leaf"] ?? .null)")
        let exported = try exportAll(b, since: before)
        #expect(Set(exported.compactMap { $0.objectValue?["_rev"] }) == Set(leaves.compactMap { $0.objectValue?["_rev"] }))
        #expect(try b.request("resolve", ["doc": .string("large"), "delete": .bool(true)])["ok"] == .bool(true))
    }

    /// backup writes a snapshot directory; a path that holds something is refused.
    func backup() throws {
        let a = try client(self.a)
        let path = self.a.temporary.path + "/conformance-backup"
        let done = try a.request("backup", ["path": .string(path), "with_identity": .bool(true)])
        #expect(done["with_identity"] == .bool(true) && done["path"] == .string(path), "\(done)")
        #expect(FileManager.default.fileExists(atPath: path + "/identity.key"))
        #expect(done["databases"] == .int(2) && FileManager.default.fileExists(atPath: path + "/databases/team%2Fnotes.sqlite"), "\(done)")
        #expect(errorCode(of: try a.request("backup", ["path": .string(path)])) == "invalid_argument")
        let check = try a.request("check")
        #expect(check["sound"] == .bool(true) && check["problems"] == .array([]) && check["seconds"] != nil, "\(check)")
        let databasesOnly = try a.request("check", ["attachments": .bool(false)])
        #expect(databasesOnly["sound"] == .bool(true) && databasesOnly["attachments"] == .int(0), "\(databasesOnly)")
    }

    /// bulk_docs writes new revisions; an entry naming a stale revision is refused alone.
    func bulkWrites() throws {
        let a = try client(self.a)
        let first = try a.request("bulk_docs", ["docs": .array([
            .object(["_id": .string("bulk-1"), "n": .int(1)]), .object(["_id": .string("bulk-2"), "n": .int(2)]),
        ])])
        let rev = try #require(first["results"]?.arrayValue?.first?.objectValue?["rev"])
        let second = try a.request("bulk_docs", ["new_edits": .bool(true), "docs": .array([
            .object(["_id": .string("bulk-1"), "_rev": rev, "n": .int(3)]),
            .object(["_id": .string("bulk-2"), "_rev": rev, "n": .int(4)]),
        ])])
        #expect(second["written"] == .int(1) && second["conflicts"] == .int(1), "\(second)")
    }

    static func sorted(_ docs: [JSONValue]) -> [String] { docs.map { String(decoding: CanonicalJSON.encode($0), as: UTF8.self) }.sorted() }

    /// Two first revisions of `id` with different bodies: a conflict once both are stored.
    static func conflictingLeaves(_ id: String) -> [JSONValue] {
        ["a", "b"].map { side in
            .object(["_id": .string(id), "_rev": .string("1-" + String(repeating: side, count: 32)), "side": .string(side)])
        }
    }

    /// conflicts and resolve on B (manual): one conflict settled by each kind of decision.
    func resolveByCommand() throws {
        let b = try client(self.b)
        #expect(try b.request("import", ["docs": .array(["p1", "p2", "p3"].flatMap(Self.conflictingLeaves))])["ok"] == .bool(true))
        let rows = try #require(b.request("conflicts")["conflicts"]?.arrayValue)
        #expect(rows.count == 3)
        let loser = JSONValue.string("1-" + String(repeating: "a", count: 32))
        #expect(try b.request("resolve", ["doc": .string("p1"), "pick": loser])["ok"] == .bool(true))
        #expect(try b.request("resolve", ["doc": .string("p2"), "body": .object(["side": .string("merged")])])["ok"] == .bool(true))
        #expect(try b.request("resolve", ["doc": .string("p3"), "delete": .bool(true)])["ok"] == .bool(true))
        #expect(errorCode(of: try b.request("resolve", ["doc": .string("p1"), "delete": .bool(true)])) == "not_conflicted")
    }
}

extension JSONValue {
    var arrayValue: [JSONValue]? {
        if case .array(let elements) = self { return elements }
        return nil
    }

    var stringValue: String? {
        if case .string(let text) = self { return text }
        return nil
    }
}
