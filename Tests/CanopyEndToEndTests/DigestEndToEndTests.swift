import CanopyCore
import CanopyStore
import Foundation
import Testing

/// Database digests between real agents: equal exactly when the nodes hold the same documents,
/// shown by `status` and `db list`, kept across a restart, and checked by `canopyctl check`.
@Suite("database digests between real agents", .serialized)
struct DigestEndToEndTests {
    /// The `default` database's digest as `status --json` gives it.
    static func digest(_ agent: AgentProcess) throws -> String {
        guard case .string(let digest)? = try agent.client().request("status")["digest"] else { throw TimedOut(what: "a digest in status") }
        return digest
    }

    @Test("two agents that replicated everything show the same digest in status and db list; a write changes it until the peer has it too")
    func convergedNodesAgree() throws {
        let (a, b) = try AgentProcess.peeredPair()
        let empty = String(repeating: "0", count: 64)
        #expect(try Self.digest(a) == empty && Self.digest(b) == empty, "an empty database's digest is all zeros")
        for n in 0..<3 { try a.put("a\(n)", ["n": .int(Int64(n))]) }
        for n in 0..<2 { try b.put("b\(n)", ["n": .int(Int64(n))]) }
        try poll("both agents to hold the same five documents") {
            let (digestA, digestB) = (try Self.digest(a), try Self.digest(b))
            let countA = try a.client().request("status")["doc_count"]
            let countB = try b.client().request("status")["doc_count"]
            return digestA == digestB && digestA != empty && countA == .int(5) && countB == .int(5)
        }
        let agreed = try Self.digest(a)
        #expect(agreed.count == 64 && agreed.allSatisfy(\.isHexDigit))

        // What an operator reads: the status line and the db list column.
        let status = try a.ctl(["status"])
        #expect(status.stdout.split(separator: "\n").contains { $0.hasPrefix("digest") && $0.hasSuffix(agreed) }, "\(status.stdout)")
        for agent in [a, b] {
            let list = try agent.ctl(["db", "list"]).stdout.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true) }
            #expect(list.first?.joined(separator: " ") == "DATABASE DOCUMENTS UPDATE SEQ CONFLICTS DIGEST SHARED WITH")
            #expect(list.dropFirst().first?[4] == agreed.prefix(16), "\(list)")
        }

        // A write on one side changes its digest at once; the peer reaches it by replicating.
        try a.put("late", ["x": .int(1)])
        let changed = try Self.digest(a)
        #expect(changed != agreed)
        try poll("b to replicate the late write") { try Self.digest(b) == changed }

        // A deletion changes it again (the tombstone is a different open leaf), and replicates.
        guard case .string(let rev)? = try a.client().request("get", ["doc": .string("late")])["doc"]?.objectValue?["_rev"] else {
            throw TimedOut(what: "late's revision")
        }
        #expect(try a.ctl(["delete", "late", "--rev", rev]).status == 0)
        let deleted = try Self.digest(a)
        #expect(deleted != changed && deleted != agreed)
        try poll("b to replicate the deletion") { try Self.digest(b) == deleted }

        // Kept in the file: the same digest after a restart.
        #expect(try a.ctl(["shutdown"]).status == 0)
        try a.restart()
        #expect(try Self.digest(a) == deleted)
    }

    @Test("check reports digest buckets that disagree with the document rows; the documents are untouched")
    func checkFindsAWrongDigest() throws {
        let agent = try AgentProcess()
        try agent.start()
        for n in 0..<20 { try agent.put("doc-\(n)", ["n": .int(Int64(n))]) }
        #expect(try agent.ctl(["check"]).status == 0, "a sound file passes")
        #expect(try agent.ctl(["shutdown"]).status == 0)
        let file = try Database(path: agent.dataDir + "/canopy.sqlite")
        try file.run("UPDATE digest_buckets SET digest = zeroblob(32) WHERE bucket = (SELECT min(bucket) FROM digest_buckets)")
        try agent.restart()
        let check = try agent.ctl(["check"])
        #expect(check.status == 1 && check.stdout.contains("1 digest buckets disagree with the document rows"), "\(check.stdout)\(check.stderr)")
        #expect(try agent.client().request("status")["doc_count"] == .int(20))
    }
}
