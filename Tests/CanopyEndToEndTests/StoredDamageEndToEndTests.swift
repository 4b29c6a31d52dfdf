import CanopyAgent
import CanopyCore
import Foundation
import Testing

/// Damage in an agent's database file stays there: a document whose stored id is not valid UTF-8
/// or whose stored body no longer matches its revision id is never sent to a peer, never read with
/// characters substituted, and is reported (status, event, log) while the rest replicates.
@Suite("stored damage, end to end", .serialized)
struct StoredDamageEndToEndTests {
    @Test("damaged documents are reported by their node and never reach a peer; the rest does")
    func damageStaysHome() throws {
        let a = try AgentProcess()
        let b = try AgentProcess()
        try a.start()
        try b.start()
        for index in 0..<5 { try a.put("fine-\(index)", ["n": .int(Int64(index))]) }
        try a.put("bad-body", ["n": .int(100)])
        try a.put("bad-id", ["n": .int(200)])
        let path = a.dataDir + "/canopy.sqlite"
        try StoredRevisionEdits.damageBody(in: path, from: #"{"n":100}"#, to: #"{"n":101}"#)
        try StoredRevisionEdits.damageID(in: path, documentID: "bad-id", to: Array("bad-".utf8) + [0xFF] + Array("-id".utf8))

        try a.allow(b)
        let added = try b.ctl(["peer", "add", a.nodeID, try a.listenAddress(), "--direction", "pull", "--mode", "once"])
        #expect(added.status == 0, "\(added.stderr)")
        let sync = try b.ctl(["sync", a.nodeID, "--wait", "--timeout", "60"])
        #expect(sync.status == 0, "\(sync.stdout) \(sync.stderr)")

        // B has every sound document and nothing else: no damaged body, no id with U+FFFD.
        let exported = try b.client().request("export", ["limit": .int(100)])
        let ids = (exported["docs"]?.arrayValue ?? []).compactMap { $0.objectValue?["_id"]?.stringValue }
        #expect(ids.sorted() == (0..<5).map { "fine-\($0)" }, "\(ids)")
        #expect(try b.value(of: "bad-body", "n") == nil)

        // A says so: counted in status, an event per damaged document, an error line in its log.
        let status = try a.client().request("status")
        #expect(status["damaged"] == .int(2), "\(status)")
        let shown = try a.ctl(["status"])
        #expect(shown.stdout.contains("damaged") && shown.stdout.contains("canopyctl check"), "\(shown.stdout)")
        let events = try a.client()
        let subscribed = try events.request("events", ["since": .int(0)])
        guard case .int(let last)? = subscribed["last_seq"] else {
            Issue.record("no last_seq in \(subscribed)")
            return
        }
        var damaged: [[String: JSONValue]] = []
        for _ in 0..<last {
            let event = try events.readObject()["event"]?.objectValue
            if event?["type"] == .string("document.damaged"), let data = event?["data"]?.objectValue { damaged.append(data) }
        }
        #expect(damaged.count == 2, "\(damaged)")
        let body = damaged.first { $0["doc"] == .string("bad-body") }
        #expect(body?["rev"] != nil && body?["reason"]?.stringValue?.contains("no longer matches") == true, "\(damaged)")
        let id = damaged.first { $0["doc"]?.stringValue?.hasPrefix("bad-") == true && $0["doc"] != .string("bad-body") }
        #expect(id?["reason"]?.stringValue?.contains("not valid UTF-8") == true, "\(damaged)")
        try poll("the damage in a's log") { a.log.contains("is damaged") && a.log.contains("not sent to peers") }

        // Reading the damaged document is an error naming the damage, never a substituted body.
        let get = try a.ctl(["get", "bad-body"])
        #expect(get.status != 0 && get.stderr.contains("damaged"), "\(get.status) \(get.stdout) \(get.stderr)")
        // A's own export goes on with the rest.
        let own = try a.client().request("export", ["limit": .int(100)])
        let ownIDs = (own["docs"]?.arrayValue ?? []).compactMap { $0.objectValue?["_id"]?.stringValue }
        #expect(ownIDs.sorted() == (0..<5).map { "fine-\($0)" }, "\(ownIDs)")
        #expect(own["done"] == .bool(true))
    }

    @Test("damage that leaves a row well formed is named by check, left out of export and never sent; the rest goes on")
    func rowDamage() throws {
        let a = try AgentProcess()
        let b = try AgentProcess()
        try a.start()
        try b.start()
        for index in 0..<4 { try a.put("fine-\(index)", ["n": .int(Int64(index))]) }
        for id in ["leaf", "flag", "moved"] { try a.put(id, ["n": .int(9)]) }
        let path = a.dataDir + "/canopy.sqlite"
        // One flipped bit in a leaf's digest, a flipped deleted flag, and an id changed in both its
        // row and the row's index (SQLite's own check sees nothing wrong with any of them).
        try StoredRevisionEdits.flipLeafBit(in: path, documentID: "leaf")
        try StoredRevisionEdits.edit(in: path, "UPDATE documents SET deleted = 1 WHERE doc_id = 'flag'")
        try StoredRevisionEdits.edit(in: path, "UPDATE documents SET doc_id = 'renamed' WHERE doc_id = 'moved'")
        let fine = (0..<4).map { "fine-\($0)" }

        // `check` names each damaged document and exits 1.
        let check = try a.ctl(["check"])
        #expect(check.status == 1, "\(check.status) \(check.stdout) \(check.stderr)")
        for id in ["leaf", "flag", "renamed"] { #expect(check.stdout.contains("document \"\(id)\""), "\(id): \(check.stdout)") }
        let checked = try a.client().request("check")
        #expect(checked["sound"] == .bool(false) && checked["documents"] == .int(7), "\(checked)")
        let damagedIDs = (checked["damaged"]?.arrayValue ?? []).compactMap { $0.objectValue?["doc"]?.stringValue }
        #expect(damagedIDs.sorted() == ["flag", "leaf", "renamed"], "\(checked)")

        // `export` writes every other document, names the damaged ones on stderr and exits 1.
        let export = try a.ctl(["export"])
        #expect(export.status == 1, "\(export.status) \(export.stderr)")
        let body = try JSONValue.parse(export.stdout)
        let exported = (body.objectValue?["docs"]?.arrayValue ?? []).compactMap { $0.objectValue?["_id"]?.stringValue }
        #expect(exported.sorted() == fine, "\(exported)")
        for id in ["leaf", "flag", "renamed"] { #expect(export.stderr.contains("not exported: \"\(id)\""), "\(id): \(export.stderr)") }
        #expect(export.stderr.contains("canopyctl check"), "\(export.stderr)")

        // A fresh peer gets the sound documents and nothing under the changed id; A counts the damage.
        try a.allow(b)
        let added = try b.ctl(["peer", "add", a.nodeID, try a.listenAddress(), "--direction", "pull", "--mode", "once"])
        #expect(added.status == 0, "\(added.stderr)")
        let sync = try b.ctl(["sync", a.nodeID, "--wait", "--timeout", "60"])
        #expect(sync.status == 0, "\(sync.stdout) \(sync.stderr)")
        let pulled = (try b.client().request("export", ["limit": .int(100)])["docs"]?.arrayValue ?? [])
            .compactMap { $0.objectValue?["_id"]?.stringValue }
        #expect(pulled.sorted() == fine, "\(pulled)")
        let status = try a.client().request("status")
        #expect(status["damaged"] == .int(3), "\(status)")
        try poll("the damage in a's log") { a.log.contains("is damaged") && a.log.contains("canopyctl check") }
    }
}
