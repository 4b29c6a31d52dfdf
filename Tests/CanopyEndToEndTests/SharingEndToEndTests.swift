import CanopyAgent
import CanopyCore
import Foundation
import Testing

/// What a peer may do to a node's copy of `default`, set with `canopyctl share` and enforced by
/// the node that holds the data, between real agents over encrypted TCP.
@Suite("sharing the default database with rights, between real agents", .serialized)
struct SharingEndToEndTests {
    /// Two agents that allow each other; `a` dials `b`.
    static func pair() throws -> (AgentProcess, AgentProcess) {
        let a = try AgentProcess()
        let b = try AgentProcess()
        try a.start()
        try b.start()
        try b.allow(a)
        try a.allow(b)
        return (a, b)
    }

    @Test("a read-only peer scoped to a prefix gets those documents and their deletions, nothing else, and nothing of it is taken back")
    func readOnlyPrefixScopedPeer() throws {
        let (a, b) = try Self.pair()
        let shared = try a.ctl(["share", "default", b.nodeID, "--access", "read", "--prefix", "pub:"])
        #expect(shared.stdout == "shared default with \(b.nodeID): read (ids starting pub:)\n", "\(shared.stdout)\(shared.stderr)")
        _ = try a.put("pub:1", ["text": .string("for everyone")])
        let secret = try a.put("secret:1", ["text": .string("mine")])
        _ = try b.put("pub:2", ["text": .string("written on b")])
        let pubDeleted = try a.put("pub:gone", ["text": .string("soon deleted")])
        #expect(try a.ctl(["delete", "pub:gone", "--rev", pubDeleted]).status == 0)
        #expect(try a.ctl(["delete", "secret:1", "--rev", secret]).status == 0)

        // b shares default read-write, but a takes nothing from it: b's sync says so (exit 1).
        let fromB = try b.ctl(["sync", a.nodeID, "--wait", "--timeout", "60"])
        #expect(fromB.status == 1 && fromB.stderr.contains("takes none of this node's writes to default"), "\(fromB.stderr)")
        #expect(try b.value(of: "pub:1", "text") == .string("for everyone"))
        let changesOnB = try b.ctl(["changes"]).stdout
        #expect(changesOnB.contains("pub:gone"), "the deletion of a shared document reaches b: \(changesOnB)")
        #expect(!changesOnB.contains("secret:1"), "neither secret:1 nor its deletion reaches b: \(changesOnB)")
        #expect(try a.ctl(["sync", b.nodeID, "--wait", "--timeout", "60"]).status == 0)
        #expect(try a.ctl(["get", "pub:2"]).status == 4, "a never pulls from a peer that may only read")

        let peers = try DatabasesEndToEndTests.json(try a.ctl(["--json", "peers"]))
        #expect(peers["peers"]?.arrayValue?.first?.objectValue?["direction"] == .string("push"), "\(peers)")
        let list = try a.ctl(["db", "list"]).stdout
        #expect(list.contains("\(b.nodeID) (read, ids starting pub:)"), "\(list)")
    }

    @Test("a write-only peer scoped to a prefix pushes those documents in, may not pull, and unshare stops it")
    func writeOnlyPrefixScopedPeer() throws {
        let (a, b) = try Self.pair()
        #expect(try a.ctl(["share", "default", b.nodeID, "--access", "write", "--prefix", "inbox:"]).status == 0)
        _ = try a.put("private", ["text": .string("stays on a")])
        _ = try b.put("inbox:1", ["text": .string("dropped off")])
        _ = try b.put("other:1", ["text": .string("not a's to take")])

        #expect(try a.ctl(["sync", b.nodeID, "--wait", "--timeout", "60"]).status == 0)
        #expect(try a.value(of: "inbox:1", "text") == .string("dropped off"))
        #expect(try a.ctl(["get", "other:1"]).status == 4)
        try poll("b to learn that a does not let it pull") {
            let row = try DatabasesEndToEndTests.json(try b.ctl(["--json", "peers"]))["peers"]?.arrayValue?.first?.objectValue
            guard case .string(let error)? = row?["last_error"] else { return false }
            return error.contains("does not let this node pull")
        }
        #expect(try b.ctl(["get", "private"]).status == 4)

        #expect(try a.ctl(["unshare", "default", b.nodeID]).stdout == "unshared default with \(b.nodeID)\n")
        _ = try b.put("inbox:2", ["text": .string("after unshare")])
        let peers = try DatabasesEndToEndTests.json(try a.ctl(["--json", "peers"]))
        #expect(peers["peers"]?.arrayValue?.first?.objectValue?["direction"] == .string("none"), "\(peers)")
        #expect(try a.ctl(["sync", b.nodeID, "--wait", "--timeout", "5"]).status == 4, "nothing to sync with a peer that shares nothing")
        #expect(try a.ctl(["get", "inbox:2"]).status == 4)
        let config = try String(contentsOfFile: a.dataDir + "/canopy.conf", encoding: .utf8)
        #expect(config.contains("[share default \(b.nodeID)]\naccess = none\n"), "\(config)")
    }

    @Test("several databases replicate over one connection, each as shared; a database offered but not shared is pending until shared")
    func severalDatabasesOverOneConnection() throws {
        let (a, b) = try Self.pair()
        for agent in [a, b] { #expect(try agent.ctl(["db", "create", "notes"]).status == 0) }
        #expect(try a.ctl(["db", "create", "photos"]).status == 0)
        #expect(try a.ctl(["share", "notes", b.nodeID, "--access", "read-write"]).status == 0)
        #expect(try b.ctl(["share", "notes", a.nodeID, "--access", "read-write"]).status == 0)
        #expect(try a.ctl(["share", "photos", b.nodeID, "--access", "read"]).status == 0)
        #expect(try a.ctl(["put", "n-a", "--db", "notes", "--body", #"{"from":"a"}"#]).status == 0)
        #expect(try b.ctl(["put", "n-b", "--db", "notes", "--body", #"{"from":"b"}"#]).status == 0)
        #expect(try a.ctl(["put", "p-1", "--db", "photos", "--body", #"{"jpeg":true}"#]).status == 0)
        _ = try a.put("d-a", ["in": .string("default")])

        // photos: b does not have it; a's offer waits on b.
        try poll("b to list a's offer of photos") { try b.ctl(["db", "pending"]).stdout.contains("photos") }
        let pending = try b.ctl(["db", "pending"]).stdout
        #expect(pending.contains(a.nodeID) && pending.contains("no (db create first)"), "\(pending)")
        // The offer outlives a restart of b: it is the same offer, first seen before the restart.
        let firstSeen = try #require(try DatabasesEndToEndTests.json(try b.ctl(["--json", "db", "pending"]))["pending"]?
            .arrayValue?.first?.objectValue?["first_seen"])
        #expect(try b.ctl(["shutdown"]).status == 0)
        try b.restart()
        let afterRestart = try DatabasesEndToEndTests.json(try b.ctl(["--json", "db", "pending"]))["pending"]
        #expect(afterRestart?.arrayValue?.first?.objectValue?["first_seen"] == firstSeen, "\(String(describing: afterRestart))")
        try poll("notes both ways and default") {
            try b.ctl(["get", "n-a", "--db", "notes"]).status == 0 && a.ctl(["get", "n-b", "--db", "notes"]).status == 0
                && b.value(of: "d-a", "in") == .string("default")
        }
        #expect(try b.ctl(["get", "n-a"]).status == 4, "a notes document stays in notes")

        // Accepting the offer: b makes the database and lets a write it (a only lets b read).
        #expect(try b.ctl(["db", "create", "photos"]).status == 0)
        #expect(try b.ctl(["share", "photos", a.nodeID, "--access", "write"]).status == 0)
        try poll("photos on b") { try b.ctl(["get", "p-1", "--db", "photos"]).status == 0 }
        #expect(try b.ctl(["db", "pending"]).stdout == "no pending databases\n")

        #expect(try a.ctl(["status"]).stdout.contains("databases shared with each peer"))
        let table = try a.ctl(["peers"]).stdout
        let photosRow = table.split(separator: "\n").first { $0.contains(" photos ") }.map { $0.split(separator: " ", omittingEmptySubsequences: true) }
        #expect(table.contains("databases shared with each peer") && photosRow?.prefix(4) == [Substring(b.nodeID), "photos", "read", "every"], "\(table)")
        let peers = try DatabasesEndToEndTests.json(try a.ctl(["--json", "peers"]))
        let databases = peers["peers"]?.arrayValue?.first?.objectValue?["databases"]?.arrayValue?.compactMap(\.objectValue) ?? []
        #expect(databases.map { $0["db"] } == [.string("default"), .string("notes"), .string("photos")], "\(peers)")
        #expect(databases.last?["access"] == .string("read"))
        let synced = try a.ctl(["sync", b.nodeID, "--wait", "--timeout", "60"])
        #expect(synced.status == 0, "one sync covers every shared database: \(synced.stderr)")
        // A peer that shares only other databases than default is synced all the same.
        #expect(try b.ctl(["unshare", "default", a.nodeID]).status == 0)
        let withoutDefault = try b.ctl(["sync", a.nodeID, "--wait", "--timeout", "60"])
        #expect(withoutDefault.status == 0, "\(withoutDefault.stderr)")
    }

    /// The types of the events `agent` holds, through a marker document written now (the
    /// events after it are not waited for).
    static func heldEventTypes(_ agent: AgentProcess, marker: String) throws -> [(type: String, data: [String: JSONValue])] {
        let reader = try agent.client()
        _ = try reader.request("events", ["since": .int(0)])
        _ = try agent.put(marker, [:])
        var seen: [(type: String, data: [String: JSONValue])] = []
        while true {
            guard case .object(let event)? = try reader.readObject()["event"], case .string(let type)? = event["type"] else { continue }
            let data = event["data"]?.objectValue ?? [:]
            if type == "document.changed" && data["doc"] == .string(marker) { return seen }
            seen.append((type, data))
        }
    }

    @Test("a dismissed database offer stays dismissed while the peer asks again, across a restart, until the database is shared")
    func dismissedOfferStaysDismissed() throws {
        let (a, b) = try Self.pair()
        #expect(try a.ctl(["db", "create", "photos"]).status == 0)
        #expect(try a.ctl(["share", "photos", b.nodeID, "--access", "read"]).status == 0)
        #expect(try a.ctl(["put", "p-1", "--db", "photos", "--body", #"{"jpeg":true}"#]).status == 0)
        try poll("b to list a's offer of photos") { try b.ctl(["db", "pending"]).stdout.contains("photos") }
        let dismissed = try b.ctl(["db", "dismiss", "photos", a.nodeID])
        #expect(dismissed.stdout == "dismissed photos from \(a.nodeID)\n", "\(dismissed.stdout)\(dismissed.stderr)")
        #expect(try b.ctl(["db", "pending"]).stdout == "no pending databases\n")

        // a's replicator asks again as it backs off; b refuses it quietly (and logs it at debug).
        let quietly = "refused a request for a dismissed database offer"
        try poll("a to ask b for photos again", limitSeconds: 90) {
            if b.log.contains(quietly) { return true }
            return try b.ctl(["db", "pending"]).stdout.contains("photos")
        }
        #expect(try b.ctl(["db", "pending"]).stdout == "no pending databases\n")
        let offered = try Self.heldEventTypes(b, marker: "marker-1").filter { $0.type == "share.pending" }
        #expect(offered.count == 1, "share.pending once, before the dismissal: \(offered)")
        #expect(try b.ctl(["db", "dismiss", "photos", a.nodeID]).status == 4, "a dismissed offer is no pending offer")

        // The dismissal is kept in pending-shares.json: a restarted b still refuses quietly.
        let file = try String(contentsOfFile: b.dataDir + "/pending-shares.json", encoding: .utf8)
        #expect(file.contains(#""dismissed":true"#), "\(file)")
        #expect(try b.ctl(["shutdown"]).status == 0)
        let quietBefore = b.log.components(separatedBy: quietly).count
        try b.restart()
        try poll("a to ask the restarted b for photos again", limitSeconds: 90) {
            if b.log.components(separatedBy: quietly).count > quietBefore { return true }
            return try b.ctl(["db", "pending"]).stdout.contains("photos")
        }
        #expect(try b.ctl(["db", "pending"]).stdout == "no pending databases\n")
        #expect(try Self.heldEventTypes(b, marker: "marker-2").filter { $0.type == "share.pending" }.isEmpty)

        // Sharing it is what ends the dismissal: the database replicates.
        #expect(try b.ctl(["db", "create", "photos"]).status == 0)
        #expect(try b.ctl(["share", "photos", a.nodeID, "--access", "write"]).status == 0)
        try poll("photos on b") { try b.ctl(["get", "p-1", "--db", "photos"]).status == 0 }
        let after = try String(contentsOfFile: b.dataDir + "/pending-shares.json", encoding: .utf8)
        #expect(!after.contains("photos"), "\(after)")
    }
}
