import CanopyCore
import Foundation
import Testing

/// `canopyctl compare`: two real agents asked over their replication connection whether they
/// hold the same documents, and where not, which side holds what (`Protocol/digests.md` §6).
@Suite("compare a database with a peer's, between real agents", .serialized)
struct CompareEndToEndTests {
    /// `canopyctl compare PEER --json` on `agent`: the exit status and the reply.
    static func compare(_ agent: AgentProcess, _ peer: AgentProcess, _ extra: [String] = []) throws -> (status: Int32, reply: [String: JSONValue]) {
        let result = try agent.ctl(["compare", peer.nodeID, "--json"] + extra)
        guard let reply = try JSONValue.parseInput(Data(result.stdout.utf8)).objectValue else {
            throw TimedOut(what: "a compare reply: \(result.stdout)\(result.stderr)")
        }
        return (result.status, reply)
    }

    /// The differing rows of a compare reply, by document id.
    static func rows(_ reply: [String: JSONValue]) -> [String: [String: JSONValue]] {
        guard case .array(let rows)? = reply["differences"] else { return [:] }
        return Dictionary(uniqueKeysWithValues: rows.compactMap { row -> (String, [String: JSONValue])? in
            guard let object = row.objectValue, case .string(let doc)? = object["doc"] else { return nil }
            return (doc, object)
        })
    }

    /// The revisions of one side's leaves in a compare row.
    static func revisions(_ row: [String: JSONValue]?, _ side: String) -> [String] {
        guard case .array(let leaves)? = row?[side] else { return [] }
        return leaves.compactMap { $0.objectValue?["rev"]?.stringValue }
    }

    @Test("two agents in sync are identical (exit 0): the text names the database and the peer, and their digests agree")
    func identical() throws {
        let (a, b) = try AgentProcess.peeredPair()
        for n in 0..<300 { _ = try a.put("doc-\(n)", ["n": .int(Int64(n))]) }
        _ = try b.put("from-b", ["n": .int(1)])
        #expect(try a.ctl(["sync", b.nodeID, "--wait", "--timeout", "60"]).status == 0)
        try poll("a and b to agree") { try Self.compare(a, b).status == 0 }
        let (status, reply) = try Self.compare(a, b)
        #expect(status == 0 && reply["identical"] == .bool(true) && reply["differences"] == .array([]), "\(reply)")
        #expect(reply["prefix"] == .string("") && reply["truncated"] == .bool(false))
        let text = try b.ctl(["compare", a.nodeID])
        #expect(text.status == 0 && text.stdout == "identical: default holds the same documents here and on \(a.nodeID) (every document)\n",
                "\(text.stdout)\(text.stderr)")
        // The digests the two agents show agree too.
        let digestA = try a.client().request("status")["digest"]
        let digestB = try b.client().request("status")["digest"]
        #expect(digestA != nil && digestA == digestB)
    }

    @Test("a read-only share leaves documents apart: each side says which it holds, with its leaves, and exits 1; under the share's prefix only")
    func differencesUnderAShare() throws {
        let (a, b) = try SharingEndToEndTests.pair()
        #expect(try a.ctl(["share", "default", b.nodeID, "--access", "read", "--prefix", "pub:"]).status == 0)
        let first = try a.put("pub:1", ["v": .int(1)])
        _ = try a.put("secret:1", ["v": .int(1)])
        for n in 0..<200 { _ = try a.put("pub:bulk-\(n)", ["n": .int(Int64(n))]) }
        try poll("b to hold pub:1") { try b.value(of: "pub:1", "v") == .int(1) }
        #expect(try b.ctl(["sync", a.nodeID, "--wait", "--timeout", "60"]).status != 0, "a takes none of b's writes")
        // b writes a document of its own and edits pub:1; a takes neither.
        _ = try b.put("pub:mine", ["v": .int(2)])
        let edited = try b.put("pub:1", ["v": .int(3)], replacing: first)

        // From b: a lets b read ids starting pub: only, so that is what is compared.
        let (status, reply) = try Self.compare(b, a)
        #expect(status == 1 && reply["identical"] == .bool(false) && reply["prefix"] == .string("pub:"), "\(reply)")
        let rows = Self.rows(reply)
        #expect(Set(rows.keys) == ["pub:1", "pub:mine"], "\(rows.keys.sorted())")
        #expect(rows["pub:mine"]?["side"] == .string("local_only") && Self.revisions(rows["pub:mine"], "remote").isEmpty)
        #expect(rows["pub:1"]?["side"] == .string("both"))
        #expect(Self.revisions(rows["pub:1"], "local") == [edited] && Self.revisions(rows["pub:1"], "remote") == [first])

        // From a: b shares default read-write with a, so everything is compared.
        let (fromA, whole) = try Self.compare(a, b)
        let wholeRows = Self.rows(whole)
        #expect(fromA == 1 && whole["prefix"] == .string("") && Set(wholeRows.keys) == ["pub:1", "pub:mine", "secret:1"], "\(whole)")
        #expect(wholeRows["secret:1"]?["side"] == .string("local_only") && wholeRows["pub:mine"]?["side"] == .string("remote_only"))

        // The text: a table with what each side holds, and the count on stderr.
        let text = try b.ctl(["compare", a.nodeID])
        #expect(text.status == 1 && text.stdout.contains("DOC") && text.stdout.contains("SIDE") && text.stdout.contains("HERE"), "\(text.stdout)")
        #expect(text.stdout.contains("pub:mine") && text.stdout.contains("local_only") && text.stdout.contains(edited), "\(text.stdout)")
        #expect(text.stderr.contains("2 documents of default differ between this node and \(a.nodeID) (ids starting with \"pub:\")"), "\(text.stderr)")

        // A narrower prefix, a disjoint one, and a limit.
        let (_, narrow) = try Self.compare(b, a, ["--prefix", "pub:m"])
        #expect(Set(Self.rows(narrow).keys) == ["pub:mine"] && narrow["prefix"] == .string("pub:m"), "\(narrow)")
        let disjoint = try b.ctl(["compare", a.nodeID, "--prefix", "secret:"])
        #expect(disjoint.status == 1 && disjoint.stderr.contains("no document under \"secret:\" is shared with you"), "\(disjoint.stderr)")
        let (limited, one) = try Self.compare(a, b, ["--limit", "1"])
        #expect(limited == 1 && Self.rows(one).count == 1 && one["truncated"] == .bool(true), "\(one)")
    }

    @Test("refusals are clear: a peer that may not read, a database not shared, an unknown peer, a peer that is down, a bad limit")
    func refusals() throws {
        let (a, b) = try SharingEndToEndTests.pair()
        #expect(try a.ctl(["db", "create", "inbox"]).status == 0)
        #expect(try b.ctl(["db", "create", "inbox"]).status == 0)
        #expect(try a.ctl(["share", "inbox", b.nodeID, "--access", "write"]).status == 0)
        #expect(try b.ctl(["share", "inbox", a.nodeID, "--access", "read-write"]).status == 0)
        try poll("b's replication of inbox with a to connect") {
            let result = try b.ctl(["compare", a.nodeID, "--db", "inbox"])
            return result.stderr.contains("refused to compare inbox")
        }
        let refused = try b.ctl(["compare", a.nodeID, "--db", "inbox"])
        #expect(refused.status == 1 && refused.stderr.contains("does not share this database with you for reading"), "\(refused.stderr)")

        #expect(try a.ctl(["db", "create", "solo"]).status == 0)
        let solo = try a.ctl(["compare", b.nodeID, "--db", "solo"])
        #expect(solo.status == 4 && solo.stderr.contains("database solo is not shared with \(b.nodeID)"), "\(solo.stderr)")
        let stranger = try a.ctl(["compare", testNodeID(53)])
        #expect(stranger.status == 4 && stranger.stderr.contains("is not a configured peer"), "\(stranger.stderr)")
        let badLimit = try a.ctl(["compare", b.nodeID, "--limit", "0"])
        #expect(badLimit.status != 0 && badLimit.stderr.contains("limit must be"), "\(badLimit.stderr)")

        #expect(try b.ctl(["shutdown"]).status == 0)
        try poll("a to see b gone") { try a.ctl(["compare", b.nodeID]).stderr.contains("is not connected") }
        let down = try a.ctl(["compare", b.nodeID])
        #expect(down.status == 1 && down.stderr.contains("`canopyctl peers` shows why it is down"), "\(down.stderr)")
    }
}
