import CanopyAgent
import CanopyCore
import Foundation
import Testing

/// Imports the same first revision of `id` with `body` (so peers share it as an ancestor).
private func importBase(_ agents: [AgentProcess], _ id: String, _ body: [String: JSONValue]) throws {
    var doc = body
    doc["_id"] = .string(id)
    doc["_rev"] = .string("1-" + String(repeating: "e", count: 32))
    for agent in agents {
        let imported = try agent.client().request("import", ["docs": .array([.object(doc)])])
        guard imported["ok"] == .bool(true) else { throw TimedOut(what: "import: \(imported)") }
    }
}

private func revision(_ agent: AgentProcess, _ id: String) throws -> JSONValue? {
    try agent.client().request("get", ["doc": .string(id)])["doc"]?.objectValue?["_rev"]
}

private func conflicted(_ agent: AgentProcess) throws -> Int64 {
    guard case .int(let count)? = try agent.client().request("status")["conflicted_count"] else { return -1 }
    return count
}

/// Connects every pair of agents both ways.
private func mesh(_ agents: [AgentProcess]) throws {
    for a in agents { for b in agents where a !== b { try a.allow(b) } }
}

@Suite("conflicts resolved on receipt: rules and resolvers in the agent", .serialized)
struct ResolutionOnReceiptEndToEndTests {
    @Test("a conflict from a peer is offered at once to the resolver its rule names, with the ancestor, the revision it replaced and the peer; the answer settles it on both nodes")
    func offeredOnReceipt() throws {
        let a = try AgentProcess(initArguments: ["--listen", "127.0.0.1:0", "--conflicts", "manual"])
        let b = try AgentProcess()
        try b.appendConfig("[rule notes]\nprefix = note:\nstrategy = resolver notes\n")
        try a.start()
        try b.start()
        let base: [String: JSONValue] = ["type": .string("note"), "title": .string("t"), "text": .string("base")]
        try importBase([a, b], "note:1", base)
        let baseRevision = try #require(try revision(a, "note:1")?.stringValue)
        let fromA = try a.client().request("put", ["doc": .string("note:1"), "rev": .string(baseRevision), "body": .object(base.merging(["title": .string("A")]) { $1 })])
        let fromB = try b.client().request("put", ["doc": .string("note:1"), "rev": .string(baseRevision), "body": .object(base.merging(["text": .string("B")]) { $1 })])
        let resolver = try RawResolverConnection(b, name: "notes")
        let events = try EventReader(b)
        let eventsOfA = try EventReader(a)
        try mesh([a, b])

        let offer = try resolver.nextOffer()
        #expect(offer["doc"] == .string("note:1"))
        #expect(offer["resolver"] == .string("notes"))
        #expect(offer["rule"] == .string("notes"))
        #expect(offer["ancestor"] == .object(base))
        #expect(offer["local_rev"] == fromB["rev"])
        #expect(offer["node_id"] == .string(a.nodeID))
        let leaves = try #require(offer["leaves"]?.arrayValue)
        #expect(Set(leaves.compactMap { $0.objectValue?["rev"] }) == [fromA["rev"], fromB["rev"]].compactMap { $0 }.reduce(into: Set()) { $0.insert($1) })

        let detected = try events.next("conflict.detected") { $0["doc"] == .string("note:1") }
        #expect(detected["rule"] == .string("notes") && detected["strategy"] == .string("resolver notes"), "\(detected)")
        #expect(detected["node_id"] == .string(a.nodeID))
        let waiting = try events.next("conflict.waiting") { $0["doc"] == .string("note:1") }
        #expect(waiting["resolver"] == .string("notes"))

        // A keeps its conflict for `resolve` before B settles its own.
        try poll("A to hold the conflict") { try conflicted(a) == 1 }
        let merged: JSONValue = .object(base.merging(["title": .string("A"), "text": .string("B")]) { $1 })
        let answered = try resolver.answer(offer, ["body": merged])
        #expect(answered["ok"] == .bool(true), "\(answered)")
        let resolved = try events.next("conflict.resolved") { $0["doc"] == .string("note:1") }
        #expect(resolved["by"] == .string("notes"))
        #expect(try b.value(of: "note:1", "title") == .string("A") && b.value(of: "note:1", "text") == .string("B"))
        // A keeps conflicts for `resolve`, yet B's resolution ends its conflict too: one revision on both.
        try poll("A to take B's resolution") { try revision(a, "note:1") == revision(b, "note:1") && conflicted(a) == 0 }
        #expect(try conflicted(b) == 0)
        // A kept its conflict; B's revisions ended it, and A says so.
        _ = try eventsOfA.next("conflict.detected") { $0["doc"] == .string("note:1") }
        let endedOnA = try eventsOfA.next("conflict.resolved") { $0["doc"] == .string("note:1") }
        #expect(endedOnA["by"] == .string("peer") && endedOnA["node_id"] == .string(b.nodeID), "\(endedOnA)")
        #expect(endedOnA["rev"] == resolved["rev"], "\(endedOnA)")
    }

    @Test("a conflict kept for a resolver that another node's resolution ends first is reported settled by the peer, and no longer waits")
    func settledByThePeerFirst() throws {
        let a = try AgentProcess()
        let b = try AgentProcess()
        try b.appendConfig("[rule notes]\nprefix = note:\nstrategy = resolver notes\n")
        try a.start()
        try b.start()
        let base: [String: JSONValue] = ["text": .string("base")]
        try importBase([a, b], "note:1", base)
        let baseRevision = try #require(try revision(a, "note:1")?.stringValue)
        try a.put("note:1", ["text": .string("A")], replacing: baseRevision)
        try b.put("note:1", ["text": .string("B")], replacing: baseRevision)
        let resolver = try RawResolverConnection(b, name: "notes")
        let events = try EventReader(b)
        // B pulls A's edit first: its conflict is kept and offered, and left unanswered.
        let pushToB = try a.client().request("peer.add", [
            "node_id": .string(b.nodeID), "address": .string("-"), "direction": .string("push"),
        ])
        #expect(pushToB["ok"] == .bool(true), "\(pushToB)")
        let pullFromA = try b.client().request("peer.add", [
            "node_id": .string(a.nodeID), "address": .string(try a.listenAddress()), "direction": .string("pull"),
        ])
        #expect(pullFromA["ok"] == .bool(true), "\(pullFromA)")
        let offer = try resolver.nextOffer()
        #expect(offer["doc"] == .string("note:1"))
        _ = try events.next("conflict.waiting") { $0["doc"] == .string("note:1") }

        // Both ways now: A settles the conflict automatically, and its closing tombstone ends B's.
        _ = try a.client().request("peer.add", ["node_id": .string(b.nodeID), "address": .string("-"), "direction": .string("both")])
        _ = try b.client().request("peer.add", [
            "node_id": .string(a.nodeID), "address": .string(try a.listenAddress()), "direction": .string("both"),
        ])
        let ended = try events.next("conflict.resolved") { $0["doc"] == .string("note:1") }
        #expect(ended["by"] == .string("peer") && ended["node_id"] == .string(a.nodeID), "\(ended)")
        try poll("A and B on one revision") { try revision(a, "note:1") == revision(b, "note:1") }
        #expect(ended["rev"] == (try revision(b, "note:1")), "\(ended)")
        let status = try b.client().request("status")
        #expect(status["conflicted_count"] == .int(0) && status["conflicts_awaiting_resolver"] == .int(0), "\(status)")
        let row = try #require(status["resolvers"]?.arrayValue?.first?.objectValue)
        #expect(row["waiting"] == .int(0) && row["offered"] == .int(0), "\(row)")
        // The offer was withdrawn with the conflict: a late answer finds no ticket, and writes nothing.
        let late = try resolver.answer(offer, ["body": .object(["text": .string("late")])])
        #expect(late["error"]?.objectValue?["code"] == .string("not_found"), "\(late)")
        #expect(late["error"]?.objectValue?["message"]?.stringValue?.contains("settled meanwhile") == true, "\(late)")
        #expect(try b.value(of: "note:1", "text") != .string("late"))
    }

    @Test("per-type rules settle each conflict as it arrives and say which rule did; reload applies new rules to the conflicts kept")
    func perTypeRules() throws {
        let agent = try AgentProcess(initArguments: ["--listen", "127.0.0.1:0", "--conflicts", "manual"])
        try agent.appendConfig("""
            [rule notes]
            value = note
            strategy = merge-json

            [rule settings]
            prefix = settings/
            strategy = remote-wins
            """)
        try agent.start()
        let events = try EventReader(agent)
        try importConflict(agent, "n1", ["type": .string("note"), "a": .int(1)], ["type": .string("note"), "b": .int(2)])
        let noteResolved = try events.next("conflict.resolved") { $0["doc"] == .string("n1") }
        #expect(noteResolved["by"] == .string("notes"))
        #expect(try agent.value(of: "n1", "a") == .int(1) && agent.value(of: "n1", "b") == .int(2))

        try importConflict(agent, "settings/theme", ["v": .int(1)], ["v": .int(2)])
        #expect(try events.next("conflict.resolved") { $0["doc"] == .string("settings/theme") }["by"] == .string("settings"))

        // A stale write to a note is kept as a branch and merged by the rule, not refused.
        let first = try agent.put("n2", ["type": .string("note"), "a": .int(0), "b": .int(0)])
        _ = try agent.put("n2", ["type": .string("note"), "a": .int(1), "b": .int(0)], replacing: first)
        let stale = try agent.ctl(["put", "n2", "--rev", first, "--body", #"{"type":"note","a":0,"b":2}"#])
        #expect(stale.status == 0 && stale.stdout.contains("kept as a conflicting branch"), "\(stale)")
        #expect(try events.next("conflict.resolved") { $0["doc"] == .string("n2") }["by"] == .string("notes"))
        #expect(try agent.value(of: "n2", "a") == .int(1) && agent.value(of: "n2", "b") == .int(2))
        // Without a rule, a stale write is still refused (exit 3).
        let plain = try agent.put("p", ["v": .int(0)])
        _ = try agent.put("p", ["v": .int(1)], replacing: plain)
        #expect(try agent.ctl(["put", "p", "--rev", plain, "--body", #"{"v":2}"#]).status == 3)

        // No rule covers it and the catch-all is manual: kept for `resolve`.
        try importConflict(agent, "other", ["v": .int(1)], ["v": .int(2)])
        let detected = try events.next("conflict.detected") { $0["doc"] == .string("other") }
        #expect(detected["rule"] == .string("conflicts") && detected["strategy"] == .string("manual"))
        #expect(detected["leaves"]?.arrayValue?.count == 2)
        let status = try agent.client().request("status")
        #expect(status["conflicts_kept"] == .int(1) && status["conflicts_awaiting_resolver"] == .int(0), "\(status)")
        let table = try agent.ctl(["status"]).stdout
        #expect(table.contains("1 (0 waiting for a resolver, 1 kept for resolve)"))
        // The rules in force, in the order they are tried.
        #expect(table.contains("rules       notes (type = note): merge-json; settings (id settings/…): remote-wins\n"), "\(table)")
        #expect(status["rules"] == .array([
            .object(["name": .string("notes"), "prefix": .null, "field": .string("type"), "value": .string("note"), "strategy": .string("merge-json")]),
            .object(["name": .string("settings"), "prefix": .string("settings/"), "field": .null, "value": .null, "strategy": .string("remote-wins")]),
        ]), "\(status)")

        // A rule added and reloaded settles the kept conflict without a restart, and is listed.
        try agent.appendConfig("[rule rest]\nprefix = o\nstrategy = automatic\n")
        #expect(try agent.ctl(["reload"]).status == 0)
        #expect(try events.next("conflict.resolved") { $0["doc"] == .string("other") }["by"] == .string("rest"))
        #expect(try conflicted(agent) == 0)
        #expect(try agent.client().request("status")["rules"]?.arrayValue?.last?.objectValue?["name"] == .string("rest"))

        // A rule that is wrong is reported with its file and line, and the running rules stay.
        try agent.appendConfig("[rule broken]\nstrategy = newest\n")
        let reload = try agent.ctl(["reload"])
        #expect(reload.status != 0)
        #expect(reload.stderr.contains("canopy.conf:") && reload.stderr.contains("strategy must be automatic"), "\(reload.stderr)")
    }

    @Test("a database other than default keeps its conflicts for the resolver its rule names: the offer names the database and the answer settles it there")
    func otherDatabase() throws {
        let agent = try AgentProcess()
        try agent.start()
        #expect(try agent.ctl(["db", "create", "archive", "--conflicts", "manual"]).status == 0)
        // The rule is added by hand and applied by a reload, as an operator would.
        let path = agent.dataDir + "/canopy.conf"
        let text = try String(contentsOfFile: path, encoding: .utf8)
        try (text + "\n[rule old-notes]\ndatabase = archive\nprefix = note:\nstrategy = resolver keeper\n")
            .write(toFile: path, atomically: true, encoding: .utf8)
        #expect(try agent.ctl(["reload"]).status == 0)
        let events = try EventReader(agent)
        let resolver = try RawResolverConnection(agent, name: "keeper")
        let docs: [JSONValue] = [("a", "left"), ("b", "right")].map { digit, side in
            .object(["_id": .string("note:1"), "_rev": .string("1-" + String(repeating: digit, count: 32)), "side": .string(side)])
        }
        let imported = try agent.client().request("import", ["db": .string("archive"), "docs": .array(docs)])
        #expect(imported["ok"] == .bool(true), "\(imported)")
        // The same id conflicted in default is not the resolver's: default has no rule for it.
        try importConflict(agent, "note:1", ["side": .string("x")], ["side": .string("y")])

        let offer = try resolver.nextOffer()
        #expect(offer["db"] == .string("archive") && offer["doc"] == .string("note:1") && offer["rule"] == .string("old-notes"), "\(offer)")
        let waiting = try events.next("conflict.waiting") { $0["doc"] == .string("note:1") }
        #expect(waiting["db"] == .string("archive") && waiting["resolver"] == .string("keeper"), "\(waiting)")
        try poll("db.list to count archive's conflict as waiting for a resolver") {
            let rows = try agent.client().request("db.list")["databases"]?.arrayValue ?? []
            let archive = rows.first { $0.objectValue?["db"] == .string("archive") }?.objectValue
            return archive?["conflicts_awaiting_resolver"] == .int(1) && archive?["conflicted_count"] == .int(1)
        }
        let listed = try agent.client().request("conflicts", ["db": .string("archive")])["conflicts"]?.arrayValue?.first?.objectValue
        #expect(listed?["doc"] == .string("note:1") && listed?["resolver"] == .string("keeper"), "\(String(describing: listed))")
        let table = try agent.ctl(["conflicts", "--db", "archive"])
        #expect(table.stdout.contains("resolver keeper"), "\(table.stdout)")
        let answered = try resolver.answer(offer, ["body": .object(["side": .string("both")])])
        #expect(answered["ok"] == .bool(true) && answered["db"] == .string("archive"), "\(answered)")
        let resolved = try events.next("conflict.resolved") { $0["doc"] == .string("note:1") && $0["by"] == .string("keeper") }
        #expect(resolved["db"] == .string("archive"), "\(resolved)")
        let settled = try agent.client().request("get", ["db": .string("archive"), "doc": .string("note:1")])
        #expect(settled["doc"]?.objectValue?["side"] == .string("both"), "\(settled)")
        #expect(try agent.client().request("conflicts", ["db": .string("archive")])["conflicts"] == .array([]))
        // default's conflict was settled automatically (its catch-all), never offered.
        #expect(try conflicted(agent) == 0)
        let status = try agent.client().request("status")
        let row = try #require(status["resolvers"]?.arrayValue?.first?.objectValue)
        #expect(row["name"] == .string("keeper") && row["offered"] == .int(0) && row["waiting"] == .int(0), "\(row)")
    }

    @Test("an import that closes a leaf of a kept conflict ends it and says so: conflict.resolved by import")
    func settledByAnImport() throws {
        let agent = try AgentProcess(initArguments: ["--listen", "127.0.0.1:0", "--conflicts", "manual"])
        try agent.start()
        let events = try EventReader(agent)
        try importConflict(agent, "i", ["side": .string("a")], ["side": .string("b")])
        #expect(try conflicted(agent) == 1)
        let closing: JSONValue = .object([
            "_id": .string("i"), "_rev": .string("2-" + String(repeating: "f", count: 32)), "_deleted": .bool(true),
            "_closed": .bool(true),
            "_revisions": .object(["start": .int(2), "ids": .array([.string(String(repeating: "f", count: 32)), .string(String(repeating: "b", count: 32))])]),
        ])
        #expect(try agent.client().request("import", ["docs": .array([closing])])["ok"] == .bool(true))
        let ended = try events.next("conflict.resolved") { $0["doc"] == .string("i") }
        #expect(ended["by"] == .string("import") && ended["node_id"] == nil, "\(ended)")
        #expect(ended["rev"] == .string("1-" + String(repeating: "a", count: 32)), "\(ended)")
        #expect(try conflicted(agent) == 0)
    }

    @Test("an offer that fails keeps the conflict and it is offered again: refused answer, timeout (after its backoff), disconnect, re-registration, a new revision, a restart")
    func failedOffersComeBack() throws {
        let agent = try AgentProcess(initArguments: ["--listen", "127.0.0.1:0", "--conflicts", "manual"])
        try agent.appendConfig("[rule fix]\nprefix = r\nstrategy = resolver fixer\n\n[limits]\nresolver-timeout-seconds = 1\n")
        try agent.start()
        let events = try EventReader(agent)
        for id in ["r1", "r2", "r3"] { try importConflict(agent, id, ["side": .string("a")], ["side": .string("b")]) }
        try importConflict(agent, "m1", ["side": .string("a")], ["side": .string("b")])
        var status = try agent.client().request("status")
        #expect(status["conflicts_awaiting_resolver"] == .int(3) && status["conflicts_kept"] == .int(1), "\(status)")

        var resolver = try RawResolverConnection(agent, name: "fixer")
        var offers = try resolver.offers(for: ["r1", "r2", "r3"])
        #expect(offers["r1"]?["node_id"] == .null && offers["r1"]?["ancestor"] == .null)
        let notALeaf = JSONValue.string("1-" + String(repeating: "c", count: 32))
        let refused = try resolver.answer(offers["r1"]!, ["pick": notALeaf])
        #expect(refused["error"]?.objectValue?["code"] == .string("invalid_argument"), "\(refused)")
        #expect(try events.next("resolution.failed") { $0["doc"] == .string("r1") }["resolver"] == .string("fixer"))
        let notObject = try resolver.answer(offers["r3"]!, ["body": .array([])])
        #expect(notObject["error"]?.objectValue?["code"] == .string("invalid_argument"), "\(notObject)")
        // r2 gets no answer: after the timeout it is kept and reported.
        let timedOut = try events.next("resolution.failed") { $0["doc"] == .string("r2") }
        #expect(timedOut["reason"]?.stringValue?.contains("did not answer within 1 s") == true, "\(timedOut)")
        #expect(try conflicted(agent) == 4)

        // A new revision of r1 is a change: r1 is offered again, on the same connection (among
        // the offers of r2, which is offered again after its timeout's backoff).
        let third: JSONValue = .object(["_id": .string("r1"), "_rev": .string("1-" + String(repeating: "d", count: 32)), "side": .string("d")])
        #expect(try agent.client().request("import", ["docs": .array([third])])["ok"] == .bool(true))
        let again = try #require(try resolver.offers(for: ["r1"])["r1"])
        #expect(again["leaves"]?.arrayValue?.count == 3, "\(again)")

        // A disconnect with r1 outstanding keeps it; registering again offers everything kept.
        resolver.client.disconnect()
        #expect(try events.next("resolution.failed") { $0["doc"] == .string("r1") }["reason"]?.stringValue?.contains("disconnected") == true)
        #expect(try events.next("resolver.disconnected")["name"] == .string("fixer"))
        resolver = try RawResolverConnection(agent, name: "fixer")
        offers = try resolver.offers(for: ["r1", "r2", "r3"])
        #expect(try resolver.answer(offers["r1"]!, ["delete": .bool(true)])["ok"] == .bool(true))
        #expect(try resolver.answer(offers["r2"]!, ["pick": offers["r2"]!["rev"]!])["ok"] == .bool(true))
        #expect(try events.next("conflict.resolved") { $0["doc"] == .string("r2") }["by"] == .string("fixer"))
        status = try agent.client().request("status")
        #expect(status["conflicts_awaiting_resolver"] == .int(1) && status["conflicts_kept"] == .int(1), "\(status)")
        let row = try #require(status["resolvers"]?.arrayValue?.first?.objectValue)
        #expect(row["name"] == .string("fixer") && row["waiting"] == .int(1), "\(row)")

        // r3 was refused on this connection's predecessor; after a restart it waits, counted, and
        // is offered when the resolver registers.
        resolver.client.disconnect()
        #expect(try agent.ctl(["shutdown"]).status == 0)
        try agent.restart()
        status = try agent.client().request("status")
        #expect(status["conflicts_awaiting_resolver"] == .int(1), "\(status)")
        resolver = try RawResolverConnection(agent, name: "fixer")
        let afterRestart = try resolver.nextOffer()
        #expect(afterRestart["doc"] == .string("r3"))
        #expect(try resolver.answer(afterRestart, ["body": .object(["side": .string("merged")])])["ok"] == .bool(true))
        #expect(try conflicted(agent) == 1)
    }

    @Test("answers sent back to back are applied together and answered in request order, a request after them included")
    func pipelinedAnswers() throws {
        let agent = try AgentProcess(initArguments: ["--listen", "127.0.0.1:0", "--conflicts", "manual"])
        try agent.start()
        let resolver = try RawResolverConnection(agent, name: "fast", prefix: "p")
        let ids = (1...20).map { "p\($0)" }
        for id in ids { try importConflict(agent, id, ["side": .string("a")], ["side": .string("b")]) }
        let offers = try resolver.offers(for: Set(ids))
        var lines: [UInt8] = []
        for (index, id) in ids.enumerated() {
            let answer: JSONValue = .object(["id": .int(Int64(100 + index)), "cmd": .string("resolver.answer"), "ticket": offers[id]!["ticket"]!, "delete": .bool(true)])
            lines += CanonicalJSON.encode(answer) + [UInt8(ascii: "\n")]
        }
        lines += CanonicalJSON.encode(.object(["id": .int(200), "cmd": .string("status")]))
        try resolver.client.sendLine(lines)
        var order: [Int64] = []
        while order.count < ids.count + 1 {
            let line = try resolver.client.readObject()
            guard case .int(let id)? = line["id"] else { continue }
            #expect(line["ok"] == .bool(true), "\(line)")
            order.append(id)
        }
        #expect(order == (0..<Int64(ids.count)).map { 100 + $0 } + [200])
        #expect(try conflicted(agent) == 0)
    }

    @Test("on SIGTERM an answer to an offer already sent is still applied before the agent exits")
    func answersDuringShutdown() throws {
        let agent = try AgentProcess(initArguments: ["--listen", "127.0.0.1:0", "--conflicts", "manual"])
        try agent.start()
        let resolver = try RawResolverConnection(agent, name: "late", prefix: "s")
        try importConflict(agent, "s1", ["side": .string("a")], ["side": .string("b")])
        let offer = try resolver.nextOffer()
        let events = try EventReader(agent)
        agent.signal(SIGTERM)
        _ = try events.next("agent.stopping")
        let answered = try resolver.answer(offer, ["body": .object(["side": .string("kept")])])
        #expect(answered["ok"] == .bool(true), "\(answered)")
        try waitForExit(agent.process)
        try agent.restart()
        #expect(try agent.value(of: "s1", "side") == .string("kept"))
        #expect(try conflicted(agent) == 0)
    }

    @Test("three nodes with different rules (merge-json, remote-wins, automatic) converge on one revision")
    func differentRulesConverge() throws {
        let a = try AgentProcess(initArguments: ["--listen", "127.0.0.1:0", "--conflicts", "merge-json"])
        let b = try AgentProcess(initArguments: ["--listen", "127.0.0.1:0", "--conflicts", "remote-wins"])
        let c = try AgentProcess()
        for agent in [a, b, c] { try agent.start() }
        let base: [String: JSONValue] = ["x": .int(0), "y": .int(0)]
        try importBase([a, b, c], "d", base)
        let first = try #require(try revision(a, "d")?.stringValue)
        _ = try a.client().request("put", ["doc": .string("d"), "rev": .string(first), "body": .object(["x": .int(1), "y": .int(0)])])
        _ = try b.client().request("put", ["doc": .string("d"), "rev": .string(first), "body": .object(["x": .int(0), "y": .int(2)])])
        try mesh([a, b, c])
        try poll("the three nodes to agree on one revision, with no conflict") {
            let revisions = try [a, b, c].map { try revision($0, "d") }
            return Set(revisions.compactMap { $0?.stringValue }).count == 1 && revisions.allSatisfy { $0 != nil }
                && [a, b, c].allSatisfy { (try? conflicted($0)) == 0 }
        }
    }
}
