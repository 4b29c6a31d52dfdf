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
        try malformedRequests()
        try importExportRoundTrip()
        try resolveByCommand()
        try replicationWithConflicts()
        try pendingPeer()
        try syncFailsWhenThePeerIsRemoved()
        try reload()
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

    /// export in pages from A, import into C, and C exports the same documents.
    func importExportRoundTrip() throws {
        let a = try client(self.a)
        let couch = #"""
            {"docs":[{"_id":"settled","_rev":"2-aab3238922bcc25a6f606eb525ffdc56","_revisions":{"start":2,"ids":["aab3238922bcc25a6f606eb525ffdc56","c4ca4238a0b923820dcc509a6f75849b"]},"side":"winner"},
            {"_id":"settled","_rev":"3-9bf31c7ff062936a96d3c8bd1f8f2ff3","_deleted":true,"_revisions":{"start":3,"ids":["9bf31c7ff062936a96d3c8bd1f8f2ff3","c74d97b01eae257e44aa9d5bade97baf","c4ca4238a0b923820dcc509a6f75849b"]}}]}
            """#
        let docs = try #require(JSONValue.parse(Data(couch.utf8)).objectValue?["docs"])
        let imported = try a.request("import", ["docs": docs, "couchdb": .bool(true), "new_edits": .bool(false)])
        #expect(imported["revisions_added"] == .int(4), "\(imported)")
        for index in 0..<3 { _ = try a.request("put", ["doc": .string("page-\(index)"), "body": .object(["i": .int(Int64(index))])]) }
        let exported = try exportAll(a)
        let c = try client(self.c)
        #expect(try c.request("import", ["docs": .array(exported)])["ok"] == .bool(true))
        #expect(Self.sorted(try exportAll(c)) == Self.sorted(exported))
    }

    /// Every page of an export, two documents a page.
    func exportAll(_ client: RecordingClient) throws -> [JSONValue] {
        var docs: [JSONValue] = []
        var since: JSONValue = .int(0)
        while true {
            let page = try client.request("export", ["since": since, "limit": .int(2)])
            docs += page["docs"]?.arrayValue ?? []
            since = try #require(page["last_seq"])
            if page["done"] != .bool(false) { return docs }
        }
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
}
