import CanopyAgent
import CanopyCore
import CanopyStore
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A value shared with a thread that runs a blocking request.
final class Shared<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    var current: Value {
        get { lock.withLock { value } }
        set { lock.withLock { value = newValue } }
    }
}

/// The scenarios that need peers: replication with refusals and conflicts, a resolver client, a
/// pending peer, a sync that fails, reload, the event log and shutdown.
extension AdminConformanceScenarios {
    /// B pulls from A once (A keeps back a damaged document, B refuses one it cannot take, and
    /// keeps conflicts, as its policy is manual), a resolver client settles some of them, then both
    /// replicate continuously and A's automatic policy settles the rest.
    func replicationWithConflicts() throws {
        let a = try client(self.a)
        let b = try client(self.b)
        for id in ["r1", "r2", "r3", "r4", "auto"] {
            #expect(try a.request("put", ["doc": .string(id), "body": .object(["side": .string("a")])])["ok"] == .bool(true))
            #expect(try b.request("put", ["doc": .string(id), "body": .object(["side": .string("b")])])["ok"] == .bool(true))
        }
        // `damaged`'s stored body changes under A, as a flipped byte would: A must never send it
        // (it reports the damage). `refused` is stored as another build might have written it
        // (not canonical, under an id that is its hash): A sends it and B must refuse it.
        try self.a.put("damaged", ["state": .string("before")])
        try StoredRevisionEdits.damageBody(in: self.a.dataDir + "/canopy.sqlite", from: #"{"state":"before"}"#, to: #"{"state":"after"}"#)
        try self.a.put("refused", ["state": .string("sent")])
        try StoredRevisionEdits.plantNonCanonicalBody(
            in: self.a.dataDir + "/canopy.sqlite", documentID: "refused", body: #"{"state": "sent"}"#)

        let serve = try a.request("peer.add", [
            "node_id": .string(self.b.nodeID), "address": .string("-"), "direction": .string("push"), "mode": .string("continuous"),
        ])
        #expect(serve["ok"] == .bool(true), "\(serve)")
        let pull = try b.request("peer.add", [
            "node_id": .string(self.a.nodeID), "address": .string(try self.a.listenAddress()), "direction": .string("pull"),
            "mode": .string("once"),
        ])
        #expect(pull["ok"] == .bool(true), "\(pull)")
        let synced = try b.request("sync", ["node_id": .string(self.a.nodeID), "wait": .bool(true)])
        #expect(synced["ok"] == .bool(true), "\(synced)")
        let row = try #require(b.request("peers")["peers"]?.arrayValue?.first?.objectValue)
        #expect(row["rejected"] == .int(1), "\(row)")
        let damage = try a.request("status")
        #expect(damage["damaged"] == .int(1), "\(damage)")
        // `why` on A names B's refusal, with B's reason (it comes back with B's acknowledgement).
        try poll("A to say B refused `refused`") {
            let why = try a.request("why", ["db": .string("default"), "doc": .string("refused"), "peer": .string(self.b.nodeID)])
            let row = why["peers"]?.arrayValue?.first?.objectValue
            return row?["reason"] == .string("refused_by_peer") && row?["holds"] == .bool(false) && why["rev"] != .null
        }
        #expect(damage["last_damage"]?.objectValue?["doc"] == .string("damaged"), "\(damage)")
        #expect(try b.request("conflicts")["conflicts"]?.arrayValue?.count == 5)

        try resolverClient(b)

        let both: [String: JSONValue] = ["direction": .string("both"), "mode": .string("continuous")]
        _ = try a.request("peer.add", both.merging(["node_id": .string(self.b.nodeID), "address": .string("-")]) { $1 })
        _ = try b.request("peer.add", both.merging(["node_id": .string(self.a.nodeID), "address": .string(try self.a.listenAddress())]) { $1 })
        try poll("every conflict settled on A and B") {
            try a.request("conflicts")["conflicts"] == .array([]) && b.request("conflicts")["conflicts"] == .array([])
                && a.request("get", ["doc": .string("r4")])["ok"] == .bool(true)
        }
        // Settled and replicated both ways, the two hold the same r1: `compare` says so (B refused
        // `refused`, so a compare of every r… would list it).
        try poll("A's compare with B to find them identical") {
            let compared = try a.request("compare", [
                "peer": .string(self.b.nodeID), "db": .string("default"), "prefix": .string("r1"), "limit": .int(10),
            ])
            return compared["identical"] == .bool(true) && compared["prefix"] == .string("r1") && compared["differences"] == .array([])
                && compared["truncated"] == .bool(false) && compared["nodes"] != nil && compared["round_trips"] != nil
                && compared["db"] == .string("default") && compared["peer"] == .string(self.b.nodeID)
        }
        // `refused` is on A only: B refused it.
        let apart = try a.request("compare", ["peer": .string(self.b.nodeID), "prefix": .string("refused")])
        let difference = apart["differences"]?.arrayValue?.first?.objectValue
        #expect(apart["identical"] == .bool(false) && difference?["doc"] == .string("refused") && difference?["side"] == .string("local_only")
                && difference?["local"]?.arrayValue?.count == 1 && difference?["remote"] == .array([]), "\(apart)")
    }

    /// A resolver client on B answers with each kind of decision, one answer it cannot apply, and
    /// a late one; a second resolver under its name is refused; then it disconnects.
    func resolverClient(_ b: RecordingClient) throws {
        let resolver = try client(self.b)
        let registered = try resolver.request("resolver.register", ["name": .string("reviews"), "prefix": .string("r")])
        #expect(registered["prefix"] == .string("r") && registered["name"] == .string("reviews"))
        #expect(errorCode(of: try b.request("resolver.register", ["name": .string("reviews")])) == "failed")
        var questions: [String: [String: JSONValue]] = [:]
        while questions.count < 4 {
            if case .object(let question)? = try resolver.nextStreamLine()["resolve"], case .string(let doc)? = question["doc"] {
                questions[doc] = question
            }
        }
        func ticket(_ doc: String) -> JSONValue { questions[doc]?["ticket"] ?? .null }
        let other = try #require(questions["r1"]?["leaves"]?.arrayValue?.last?.objectValue?["rev"])
        #expect(try resolver.request("resolver.answer", ["ticket": ticket("r1"), "pick": other])["ok"] == .bool(true))
        #expect(try resolver.request("resolver.answer", ["ticket": ticket("r2"), "body": .object(["side": .string("merged")])])["ok"] == .bool(true))
        #expect(try resolver.request("resolver.answer", ["ticket": ticket("r3"), "delete": .bool(true)])["ok"] == .bool(true))
        // Only the registered resolver may answer.
        #expect(errorCode(of: try b.request("resolver.answer", ["ticket": ticket("r4"), "delete": .bool(true)])) == "invalid_request")
        // A revision that is no leaf of r4 cannot be kept: the conflict stays, and is offered again.
        let unknown = JSONValue.string("1-" + String(repeating: "c", count: 32))
        #expect(try resolver.request("resolver.answer", ["ticket": ticket("r4"), "pick": unknown])["ok"] == .bool(false))
        #expect(errorCode(of: try resolver.request("resolver.answer", ["ticket": ticket("r1"), "delete": .bool(true)])) == "not_found")
        // A stale put to a document the resolver's prefix covers is kept as a branch and offered.
        let first = try #require(b.request("put", ["doc": .string("r9"), "body": .object(["n": .int(1)])])["rev"])
        _ = try b.request("put", ["doc": .string("r9"), "body": .object(["n": .int(2)]), "rev": first])
        let stale = try b.request("put", ["doc": .string("r9"), "body": .object(["n": .int(3)]), "rev": first])
        #expect(stale["branched"] == .bool(true) && stale["current"]?.stringValue != nil && stale["rev"]?.stringValue != nil, "\(stale)")
        while true {
            if case .object(let offer)? = try resolver.nextStreamLine()["resolve"], offer["doc"] == .string("r9") { break }
        }
    }

    /// C, which A does not know, dials A: A lists it as pending, accepts it, then removes it.
    func pendingPeer() throws {
        let a = try client(self.a)
        let c = try client(self.c)
        #expect(try c.request("peer.add", ["node_id": .string(self.a.nodeID), "address": .string(try self.a.listenAddress())])["ok"] == .bool(true))
        try poll("C pending on A") {
            try a.request("peers")["pending"]?.arrayValue?.contains { $0.objectValue?["node_id"] == .string(self.c.nodeID) } == true
        }
        let accepted = try a.request("peer.accept", [
            "node_id": .string(self.c.nodeID), "address": .string("-"), "direction": .string("pull"), "mode": .string("once"),
        ])
        #expect(accepted["node_id"] == .string(self.c.nodeID), "\(accepted)")
        #expect(errorCode(of: try a.request("peer.accept", ["node_id": .string(testNodeID(78))])) == "not_found")
        #expect(try a.request("peer.remove", ["node_id": .string(self.c.nodeID)])["ok"] == .bool(true))
        #expect(errorCode(of: try a.request("peer.remove", ["node_id": .string(self.c.nodeID)])) == "not_found")
    }

    /// A sync waiting for a peer that is down fails when the peer is removed. The removal must
    /// reach the agent after the sync: if it came first (the sync then finds no such peer), the
    /// scenario runs again.
    func syncFailsWhenThePeerIsRemoved() throws {
        let a = try client(self.a)
        let absent = testNodeID(77)
        for _ in 0..<5 {
            _ = try a.request("peer.add", ["node_id": .string(absent), "address": .string("127.0.0.1:9")])
            // Without `wait` the reply comes at once: a sync to a peer that is down cannot finish first.
            #expect(try a.request("sync", ["node_id": .string(absent)])["started"] == .bool(true))
            let agent = self.a
            let syncsLogged = { agent.log.components(separatedBy: "admin sync node_id=\(absent)").count }
            let before = syncsLogged()
            let outcome = Shared<[String: JSONValue]?>(nil)
            let finished = DispatchSemaphore(value: 0)
            let socketPath = self.a.socketPath
            let coverage = self.coverage
            Thread.detachNewThread {
                outcome.current = try? RecordingClient(socketPath: socketPath, coverage).request(
                    "sync", ["node_id": .string(absent), "wait": .bool(true)])
                finished.signal()
            }
            // The agent logs a command as it takes it and runs `sync` and `peer.remove` in order on
            // one queue: once the line is there, the removal cannot overtake the sync.
            try poll("the waiting sync to reach the agent") { syncsLogged() > before }
            _ = try a.request("peer.remove", ["node_id": .string(absent)])
            #expect(finished.wait(timeout: .now() + waitLimitSeconds) == .success)
            let code = outcome.current.flatMap { errorCode(of: $0) }
            if code == "failed" { return }
            #expect(code == "not_found", "\(String(describing: outcome.current))")
        }
        Issue.record("the sync never outlived the removal's arrival")
    }

    /// reload with a setting that waits for a restart, with a broken file, and back.
    func reload() throws {
        let a = try client(self.a)
        let path = self.a.dataDir + "/canopy.conf"
        let original = try String(contentsOfFile: path, encoding: .utf8)
        let moved = original.split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.hasPrefix("listen") ? "listen = 127.0.0.1:9" : String($0) }.joined(separator: "\n")
        try moved.write(toFile: path, atomically: true, encoding: .utf8)
        #expect(try a.request("reload")["restart_required"] == .array([.string("listen")]))
        try (original + "\nno-such-setting = 1\n").write(toFile: path, atomically: true, encoding: .utf8)
        #expect(errorCode(of: try a.request("reload")) == "failed")
        try original.write(toFile: path, atomically: true, encoding: .utf8)
        #expect(try a.request("reload")["restart_required"] == .array([]))
    }

    /// Each agent's whole event log from the start (`since: 0`), then a live stream on A that
    /// sees A stop after `shutdown`.
    func eventsAndShutdown() throws {
        // A's peers (added by the replication scenarios) share its default database; another is
        // shared with B read-only for some ids, then no longer.
        let admin = try client(a)
        let share = try admin.request("share", [
            "db": .string("team/notes"), "node_id": .string(b.nodeID), "access": .string("read"), "prefix": .string("pub:"),
        ])
        #expect(share["shared_with"] == .object(["node_id": .string(b.nodeID), "access": .string("read"), "prefix": .string("pub:")]), "\(share)")
        let whileShared = try admin.request("db.list")["databases"]?.arrayValue?.last?.objectValue
        #expect(whileShared?["shared_with"] == .array([share["shared_with"]!]), "\(String(describing: whileShared))")
        // A now asks B for team/notes, which B does not have: B lists the offer until dismissed.
        let onB = try client(b)
        var offer: [String: JSONValue]?
        try poll("B to list A's offer of team/notes") {
            offer = try onB.request("db.pending")["pending"]?.arrayValue?.first?.objectValue
            return offer != nil
        }
        #expect(offer?["db"] == .string("team/notes") && offer?["node_id"] == .string(a.nodeID) && offer?["exists"] == .bool(false), "\(String(describing: offer))")
        #expect(try onB.request("db.dismiss", ["db": .string("team/notes"), "node_id": .string(a.nodeID)])["db"] == .string("team/notes"))
        #expect(errorCode(of: try onB.request("db.dismiss", ["db": .string("team/notes"), "node_id": .string(a.nodeID)])) == "not_found")
        #expect(errorCode(of: try admin.request("share", ["db": .string("team/notes"), "node_id": .string(c.nodeID), "access": .string("read")])) == "not_found")
        #expect(try admin.request("unshare", ["db": .string("team/notes"), "node_id": .string(b.nodeID)])["db"] == .string("team/notes"))
        #expect(errorCode(of: try admin.request("unshare", ["db": .string("team/notes"), "node_id": .string(b.nodeID)])) == "not_found")
        let databases = try admin.request("db.list")["databases"]?.arrayValue?.compactMap(\.objectValue) ?? []
        let shared = databases.first?["shared_with"]?.arrayValue?.compactMap(\.objectValue) ?? []
        #expect(shared.contains { $0["node_id"] == .string(b.nodeID) && $0["access"] == .string("read-write") }, "\(databases)")
        #expect(databases.dropFirst().allSatisfy { $0["shared_with"] == .array([]) }, "\(databases)")
        for agent in [a, b, c] {
            let events = try client(agent)
            let subscribed = try events.request("events", ["since": .int(0)])
            #expect(subscribed["missed"] == .int(0))
            guard case .int(let last)? = subscribed["last_seq"] else {
                Issue.record("no last_seq in \(subscribed)")
                continue
            }
            var seen: Int64 = 0
            while seen < last {
                guard case .int(let seq)? = try events.nextStreamLine()["event"]?.objectValue?["seq"] else { continue }
                #expect(seq == seen + 1, "events have no gaps")
                seen = seq
            }
        }
        let live = try client(a)
        _ = try live.request("events")
        let stopping = try client(a)
        guard case .string(let lockPath)? = try stopping.request("shutdown")["lock_path"] else {
            Issue.record("shutdown named no lock_path")
            return
        }
        #expect(lockPath == a.dataDir + "/canopyd.lock")
        #expect(stopping.readUntilClosed() && live.readUntilClosed())
        try waitForExit(a.process)
    }
}
