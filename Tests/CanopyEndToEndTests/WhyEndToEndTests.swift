import CanopyCore
import Foundation
import Testing

/// `canopyctl why`: for each peer, whether it holds this node's current revision of a document
/// and why not, between real agents.
@Suite("why a document is or is not on a peer, between real agents", .serialized)
struct WhyEndToEndTests {
    /// The `why` row for `peer` of `doc` on `agent`, as `canopyctl why --json` gives it.
    static func row(_ agent: AgentProcess, _ doc: String, for peer: AgentProcess? = nil, peerID: String? = nil, db: String = "default") throws -> [String: JSONValue] {
        let result = try agent.ctl(["why", doc, "--db", db, "--json"] + (peerID ?? peer.map(\.nodeID)).map { ["--peer", $0] }!)
        guard result.status == 0, case .array(let rows)? = try JSONValue.parseInput(Data(result.stdout.utf8)).objectValue?["peers"],
              let row = rows.first?.objectValue
        else { throw TimedOut(what: "a why row: \(result.stdout)\(result.stderr)") }
        return row
    }

    static func reason(_ agent: AgentProcess, _ doc: String, for peer: AgentProcess? = nil, peerID: String? = nil, db: String = "default") throws -> String? {
        if case .string(let reason)? = try row(agent, doc, for: peer, peerID: peerID, db: db)["reason"] { return reason }
        return nil
    }

    @Test("a peer that has the revision holds it; one never reached is offline; one that went away is offline since then; unknown documents and peers are refused clearly")
    func holdsAndOffline() throws {
        let (a, b) = try AgentProcess.peeredPair()
        try a.put("note", ["n": .int(1)])
        try poll("b to acknowledge note") { try Self.reason(a, "note", for: b) == "holds" }
        #expect(try Self.row(a, "note", for: b)["holds"] == .bool(true))
        let text = try a.ctl(["why", "note"])
        #expect(text.status == 0 && text.stdout.hasPrefix("note in default: this node's current revision is "), "\(text.stdout)")
        #expect(text.stdout.contains("PEER") && text.stdout.contains("HOLDS") && text.stdout.contains("REASON"), "\(text.stdout)")
        #expect(text.stdout.contains("\(b.nodeID)  yes    holds"), "\(text.stdout)")

        // A peer at an address where nobody listens: never connected.
        let unreachable = testNodeID(51)
        #expect(try a.ctl(["peer", "add", unreachable, "127.0.0.1:9"]).status == 0)
        let never = try Self.row(a, "note", peerID: unreachable)
        #expect(never["reason"] == .string("offline") && never["since"] == .null && never["holds"] == .bool(false), "\(never)")

        // b goes away; a's next write cannot reach it: offline since a moment ago.
        let before = Date().timeIntervalSince1970
        #expect(try b.ctl(["shutdown"]).status == 0)
        try a.put("later", ["n": .int(2)])
        try poll("a to see b offline") { try Self.reason(a, "later", for: b) == "offline" }
        guard case .double(let since)? = try Self.row(a, "later", for: b)["since"] ?? nil else {
            throw TimedOut(what: "a since in \(try Self.row(a, "later", for: b))")
        }
        #expect(since >= before - 1 && since <= Date().timeIntervalSince1970 + 1)
        #expect(try Self.reason(a, "note", for: b) == "holds", "what b acknowledged before it left, it still holds")

        let missing = try a.ctl(["why", "nothing-here"])
        #expect(missing.status == 4 && missing.stderr.contains("run `canopyctl why` on the node that wrote it"), "\(missing.stderr)")
        let stranger = try a.ctl(["why", "note", "--peer", testNodeID(52)])
        #expect(stranger.status != 0 && stranger.stderr.contains("is not a configured peer"), "\(stranger.stderr)")
    }

    @Test("shares explain what never goes: outside the prefix, not shared, write-only; the writer is told the read-only peer takes none of its writes")
    func sharesExplain() throws {
        let (a, b) = try SharingEndToEndTests.pair()
        #expect(try a.ctl(["share", "default", b.nodeID, "--access", "read", "--prefix", "pub:"]).status == 0)
        try a.put("pub:1", ["text": .string("for everyone")])
        try a.put("secret:1", ["text": .string("mine")])
        try b.put("pub:2", ["text": .string("written on b")])
        try poll("b to acknowledge pub:1") { try Self.reason(a, "pub:1", for: b) == "holds" }
        #expect(try Self.reason(a, "secret:1", for: b) == "outside_prefix")
        // On b, the writer: a subscribes for nothing (it lets b read only), so b's writes stay on b.
        try poll("b to learn that a takes nothing") { try Self.reason(b, "pub:2", for: a) == "peer_does_not_take" }
        #expect(try Self.row(b, "pub:2", for: a)["detail"].map { "\($0)" }?.contains("subscribes for nothing") == true)

        // A database not shared with b, and one b may only write.
        #expect(try a.ctl(["db", "create", "solo"]).status == 0)
        #expect(try a.ctl(["put", "s1", "--db", "solo", "--body", "{}"]).status == 0)
        #expect(try Self.reason(a, "s1", for: b, db: "solo") == "not_shared")
        #expect(try a.ctl(["db", "create", "inbox"]).status == 0)
        #expect(try a.ctl(["share", "inbox", b.nodeID, "--access", "write"]).status == 0)
        #expect(try a.ctl(["put", "i1", "--db", "inbox", "--body", "{}"]).status == 0)
        #expect(try Self.reason(a, "i1", for: b, db: "inbox") == "not_sent")
    }

    @Test("a document the peer refused is explained with the peer's reason")
    func refusedByPeer() throws {
        let a = try AgentProcess()
        let b = try AgentProcess()
        try a.start()
        try b.start()
        try a.allow(b)
        #expect(try b.ctl(["peer", "add", a.nodeID, try a.listenAddress(), "--direction", "pull", "--mode", "once"]).status == 0)
        try a.put("refused", ["n": .int(2)])
        try StoredRevisionEdits.plantNonCanonicalBody(in: a.dataDir + "/canopy.sqlite", documentID: "refused", body: #"{"n": 2}"#)
        _ = try b.ctl(["sync", a.nodeID, "--wait", "--timeout", "60"])
        try poll("a to hear of the refusal") { try Self.reason(a, "refused", for: b) == "refused_by_peer" }
        let row = try Self.row(a, "refused", for: b)
        #expect(row["holds"] == .bool(false) && row["detail"].map { "\($0)" }?.contains("not canonical") == true, "\(row)")
    }

    @Test("a document whose revisions wait here for their attachment content is explained, not reported missing")
    func awaitingContent() throws {
        let (a, b) = try AgentProcess.peeredPair()
        _ = try AttachmentReplicationEndToEndTests.attachDamagedOnSender(a, b)
        let result = try b.ctl(["why", "photo", "--json"])
        let reply = try JSONValue.parseInput(Data(result.stdout.utf8)).objectValue
        #expect(result.status == 0 && reply?["rev"] == .null && reply?["awaiting_content"] == .int(1), "\(result.stdout)\(result.stderr)")
        #expect(try Self.reason(b, "photo", for: a) == "awaiting_content")
        #expect(try b.ctl(["why", "photo"]).stdout.hasPrefix("photo in default: this node holds no revision yet; 1 waiting for attachment content"))
    }

    @Test("a peer that subscribes for a prefix only is said not to take the other documents, not to hold them, though it acknowledged past them")
    func peerTakesAPrefixOnly() throws {
        let (a, b) = try SharingEndToEndTests.pair()
        // b stores from a only what starts pub: (a lets b read everything).
        #expect(try b.ctl(["share", "default", a.nodeID, "--access", "write", "--prefix", "pub:"]).status == 0)
        try a.put("other", ["n": .int(1)])
        try a.put("pub:1", ["n": .int(2)])
        try poll("b to acknowledge pub:1") { try Self.reason(a, "pub:1", for: b) == "holds" }
        let other = try Self.row(a, "other", for: b)
        #expect(other["reason"] == .string("peer_does_not_take") && other["holds"] == .bool(false), "\(other)")
        #expect(try b.value(of: "other", "n") == nil)
    }
}
