import CanopyAgent
import CanopyCore
import CanopyStore
import Foundation
import Testing

/// What a user sees of replication with real agents: CouchDB data travelling a line of nodes,
/// refusals counted and reported, one-shot syncs that push, and a sync that cannot finish.
@Suite("replication as a user sees it, with real agents", .serialized)
struct ReplicationVisibilityEndToEndTests {
    /// A CouchDB `_bulk_docs` export (MD5-based revision ids), with a settled conflict whose
    /// losing branch CouchDB had deleted.
    static let couchExport = #"""
        {"new_edits":false,"docs":[
        {"_id":"from-couch","_rev":"2-b1946ac92492d2347c6235b4d2611184","_revisions":{"start":2,"ids":["b1946ac92492d2347c6235b4d2611184","9a0364b9e99bb480dd25e1f0284c8555"]},"title":"imported"},
        {"_id":"gone","_rev":"2-1f0e3dad99908345f7439f8ffabdffc4","_deleted":true,"_revisions":{"start":2,"ids":["1f0e3dad99908345f7439f8ffabdffc4","967a00dff5e02add41819138abb3284d"]}},
        {"_id":"settled","_rev":"2-aab3238922bcc25a6f606eb525ffdc56","_revisions":{"start":2,"ids":["aab3238922bcc25a6f606eb525ffdc56","c4ca4238a0b923820dcc509a6f75849b"]},"side":"winner"},
        {"_id":"settled","_rev":"3-9bf31c7ff062936a96d3c8bd1f8f2ff3","_deleted":true,"_revisions":{"start":3,"ids":["9bf31c7ff062936a96d3c8bd1f8f2ff3","c74d97b01eae257e44aa9d5bade97baf","c4ca4238a0b923820dcc509a6f75849b"]}}
        ]}
        """#

    /// The `docs` of a `canopyctl export`, each in canonical JSON, sorted.
    static func exported(_ agent: AgentProcess) throws -> [String] {
        let result = try agent.ctl(["export"])
        guard result.status == 0, case .array(let docs)? = try JSONValue.parse(Data(result.stdout.utf8)).objectValue?["docs"] else {
            Issue.record("export failed: \(result.stderr)")
            return []
        }
        return docs.map { String(decoding: CanonicalJSON.encode($0), as: UTF8.self) }.sorted()
    }

    /// The `peers` row this agent has for `other`.
    static func peerRow(_ agent: AgentProcess, for other: AgentProcess) throws -> [String: JSONValue] {
        guard case .array(let rows)? = try agent.client().request("peers")["peers"] else { return [:] }
        return rows.compactMap(\.objectValue).first { $0["node_id"] == .string(other.nodeID) } ?? [:]
    }

    @Test("a CouchDB export imported on A reaches C through B, and C's export equals A's", arguments: [false, true])
    func couchDataTravelsTheLine(couchDB: Bool) throws {
        let a = try AgentProcess()
        let b = try AgentProcess()
        let c = try AgentProcess()
        for agent in [a, b, c] { try agent.start() }
        try a.allow(b)
        try b.allow(a)
        try b.allow(c)
        try c.allow(b)
        let file = a.temporary.path + "/couch.json"
        try Data(Self.couchExport.utf8).write(to: URL(fileURLWithPath: file))
        let imported = try a.ctl(["import", file] + (couchDB ? ["--couchdb"] : []))
        #expect(imported.status == 0, "\(imported.stderr)")
        let onA = try Self.exported(a)
        #expect(onA.count == 4)
        try poll("the imported documents on c") { try Self.exported(c) == onA }
        #expect(try c.value(of: "from-couch", "title") == .string("imported"))
        for (agent, peer) in [(b, a), (c, b)] {
            #expect(try Self.peerRow(agent, for: peer)["rejected"] == .int(0))
        }
        // A Canopy edit on top of a CouchDB revision travels too, beside the CouchDB branches.
        guard case .string(let current)? = try a.client().request("get", ["doc": .string("settled")])["doc"]?.objectValue?["_rev"] else {
            Issue.record("settled has no current revision on a")
            return
        }
        let edit = try a.ctl(["put", "settled", "--rev", current, "--body", #"{"side":"edited"}"#])
        #expect(edit.status == 0, "\(edit.stderr)")
        try poll("the edit on c") { try c.value(of: "settled", "side") == .string("edited") }
        try poll("c's export to equal a's") { try Self.exported(c) == Self.exported(a) }
    }

    @Test("a document a peer refuses is counted, shown with its reason, logged, and fails sync --wait")
    func refusalsAreVisible() throws {
        let a = try AgentProcess()
        let b = try AgentProcess()
        try a.start()
        try b.start()
        try a.allow(b)
        // B pulls from A one pass at a time: nothing reaches B but through `sync`.
        let added = try b.ctl(["peer", "add", a.nodeID, try a.listenAddress(), "--direction", "pull", "--mode", "once"])
        #expect(added.status == 0, "\(added.stderr)")
        // b's first one-shot pass (a has nothing yet) ends before the documents exist, so the
        // refusal below happens during the sync, not in that pass.
        try poll("b's first pass from a to end") {
            let row = try Self.peerRow(b, for: a)
            return row["connected"] == .bool(true) && row["state"] == .string("stopped")
        }
        try a.put("fine", ["n": .int(1)])
        try a.put("refused", ["n": .int(2)])
        // A holds `refused` as another build might have written it: a body that is not canonical
        // JSON under an id that is its hash. A sends it; B must refuse it rather than store it.
        try StoredRevisionEdits.plantNonCanonicalBody(in: a.dataDir + "/canopy.sqlite", documentID: "refused", body: #"{"n": 2}"#)
        let sync = try b.ctl(["sync", a.nodeID, "--wait", "--timeout", "60"])
        let rowAfterSync = try Self.peerRow(b, for: a)
        #expect(sync.status == 1, "\(sync.stdout) \(sync.stderr) \(rowAfterSync) \(b.log.suffix(3000))")
        #expect(sync.stderr.contains("1 document from \(a.nodeID) refused during this sync"), "\(sync.stderr)")
        #expect(sync.stderr.contains("not canonical"), "\(sync.stderr)")
        #expect(try b.value(of: "fine", "n") == .int(1))
        #expect(try b.value(of: "refused", "n") == nil)
        let row = try Self.peerRow(b, for: a)
        #expect(row["rejected"] == .int(1))
        guard case .string(let reason)? = row["last_rejection"] else {
            Issue.record("no last_rejection in \(row)")
            return
        }
        #expect(reason.contains("refused") && reason.contains("not canonical"), "\(reason)")
        let table = try b.ctl(["peers"])
        #expect(table.stdout.contains("REFUSED"), "\(table.stdout)")
        try poll("the refusal in b's log") { b.log.contains("refused documents from a peer") }
        // The pushing side hears of it too: counted, with the peer's reason, logged, an event.
        try poll("a to count the document b refused") { try Self.peerRow(a, for: b)["refused_by_peer"] == .int(1) }
        guard case .string(let theirReason)? = try Self.peerRow(a, for: b)["last_refused_by_peer"] else {
            Issue.record("no last_refused_by_peer on a")
            return
        }
        #expect(theirReason.contains("refused") && theirReason.contains("not canonical"), "\(theirReason)")
        try poll("the refusal in a's log") { a.log.contains("a peer refused documents this node pushed") }
        // A second sync refuses nothing new (the document is not asked for again) and succeeds.
        let again = try b.ctl(["sync", a.nodeID, "--wait", "--timeout", "60"])
        #expect(again.status == 0, "\(again.stderr)")
    }

    @Test("the peer row tells the truth after restarts: the pull checkpoint is known, an old error is gone, a no-op sync checks nothing")
    func peerRowAfterRestarts() throws {
        let (a, b) = try AgentProcess.peeredPair()
        for index in 0..<20 { try a.put("doc-\(index)", ["n": .int(Int64(index))]) }
        try poll("b to hold a's documents") { try b.documentCount() == 20 }
        let first = try b.ctl(["sync", a.nodeID, "--wait", "--timeout", "60"])
        #expect(first.status == 0, "\(first.stderr)")
        // Nothing changed since: the next sync checks nothing (it used to repeat the session's total).
        let again = try b.ctl(["sync", a.nodeID, "--wait", "--timeout", "60"])
        #expect(again.stdout.contains("nothing to send or receive (0 changes checked)"), "\(again.stdout)")
        // A dies without a word (its connections end without the channel's final frame), then
        // comes back: b reconnects, and its row shows no error from the dead connection.
        try a.killAndRestart()
        try poll("b to reconnect to a") { try Self.peerRow(b, for: a)["connected"] == .bool(true) }
        try poll("b's row for a to be healthy") {
            let row = try Self.peerRow(b, for: a)
            return row["state"] == .string("idle") && row["last_error"] == .null
        }
        // B restarts caught up (on the port a knows): its pull checkpoint is known before
        // anything new arrives.
        let address = try b.listenAddress()
        let stopped = try b.ctl(["shutdown"])
        #expect(stopped.status == 0, "\(stopped.stderr)")
        try waitForExit(b.process)
        try b.restart(extraArguments: ["--listen", address])
        try poll("b's pull checkpoint after its restart") {
            if case .int(let sequence)? = try Self.peerRow(b, for: a)["last_pulled_seq"] { return sequence >= 20 }
            return false
        }
    }

    @Test("sync --wait on a one-shot peer pushes this node's new documents")
    func oneShotSyncPushes() throws {
        let a = try AgentProcess()
        let b = try AgentProcess()
        try a.start()
        try b.start()
        let addA = try a.ctl(["peer", "add", b.nodeID, try b.listenAddress(), "--mode", "once"])
        let addB = try b.ctl(["peer", "add", a.nodeID, try a.listenAddress(), "--mode", "once"])
        #expect(addA.status == 0 && addB.status == 0, "\(addA.stderr) \(addB.stderr)")
        let first = try a.ctl(["sync", b.nodeID, "--wait", "--timeout", "60"])
        #expect(first.status == 0, "\(first.stderr)")
        try a.put("late", ["n": .int(7)])
        let second = try a.ctl(["sync", b.nodeID, "--wait", "--timeout", "60"])
        #expect(second.status == 0, "\(second.stderr)")
        #expect(second.stdout.contains("synced with"), "\(second.stdout)")
        #expect(try b.value(of: "late", "n") == .int(7))
        // b wrote nothing, a wrote one document that b now has: nothing is unconfirmed either way
        // (a one-shot pass that pushed ends with a confirming pull).
        try b.put("from-b", ["n": .int(8)])
        let third = try a.ctl(["sync", b.nodeID, "--wait", "--timeout", "60"])
        #expect(third.status == 0, "\(third.stderr)")
        try poll("a and b to confirm each other's documents") {
            try Self.peerRow(a, for: b)["pending"] == .int(0) && Self.peerRow(b, for: a)["pending"] == .int(0)
        }
    }

    @Test("sync --wait --timeout to a peer that is down exits 1 and says what it waited for")
    func syncTimesOut() throws {
        let a = try AgentProcess()
        try a.start()
        let absent = testNodeID(77)
        let added = try a.ctl(["peer", "add", absent, "127.0.0.1:9"])
        #expect(added.status == 0, "\(added.stderr)")
        let sync = try a.ctl(["sync", absent, "--wait", "--timeout", "2"])
        #expect(sync.status == 1)
        #expect(sync.stderr.contains("waiting for \(absent) at 127.0.0.1:9"), "\(sync.stderr)")
        #expect(sync.stderr.contains("did not finish within 2 s"), "\(sync.stderr)")
    }
}
