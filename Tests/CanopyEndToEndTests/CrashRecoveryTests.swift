import CanopyAgent
import CanopyCore
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `count` documents with content-addressed revision ids (so peers accept them), as
/// `_bulk_docs` entries.
private func generatedDocuments(_ count: Int) -> [JSONValue] {
    (0..<count).map { index in
        let body: [String: JSONValue] = ["n": .int(Int64(index)), "pad": .string(String(repeating: "x", count: 100))]
        let rev = RevisionHasher.revisionID(parent: nil, kind: .live, body: .object(body))
        var members = body
        members["_id"] = .string(String(format: "doc%05d", index))
        members["_rev"] = .string(rev.description)
        return .object(members)
    }
}

@Suite("crash recovery with real processes", .serialized)
struct CrashRecoveryTests {
    static let documentCount = 20_000
    /// Replicating 20k documents through a debug build on a shared two-core machine takes
    /// seconds; the bound is generous so only a real stall fails the test.
    static let convergenceLimitSeconds = 180.0

    @Test("kill -9 of the middle node during a 20k-document replication: after a restart all three converge with nothing lost")
    func middleNodeKilledMidReplication() throws {
        let a = try AgentProcess()
        let b = try AgentProcess()
        let c = try AgentProcess()
        for agent in [a, b, c] { try agent.start() }
        try b.allow(c)
        try c.allow(b)
        let writer = try a.client()
        let documents = generatedDocuments(Self.documentCount)
        for start in stride(from: 0, to: documents.count, by: 2000) {
            let chunk = Array(documents[start..<min(start + 2000, documents.count)])
            #expect(try writer.request("import", ["docs": .array(chunk)])["ok"] == .bool(true))
        }
        try a.allow(b)
        try b.allow(a)
        try poll("b to receive part of the documents", limitSeconds: Self.convergenceLimitSeconds) { try b.documentCount() > 0 }
        try b.killAndRestart()
        try poll("c to hold every document", limitSeconds: Self.convergenceLimitSeconds) {
            try c.documentCount() == Int64(Self.documentCount)
        }
        #expect(try b.documentCount() == Int64(Self.documentCount))
        for index in [0, 9_999, Self.documentCount - 1] {
            #expect(try c.value(of: String(format: "doc%05d", index), "n") == .int(Int64(index)))
        }
        let integrity = try c.client().request("changes", ["since": .int(0), "limit": .int(Int64(Self.documentCount))])
        guard case .array(let results)? = integrity["results"] else {
            Issue.record("no changes on c")
            return
        }
        #expect(Set(results.compactMap { $0.objectValue?["doc"] }).count == Self.documentCount)
    }

    @Test("SIGTERM exits 0 with checkpoints written: after a restart the agent resumes instead of starting over")
    func sigtermWritesCheckpoints() throws {
        let a = try AgentProcess()
        let b = try AgentProcess()
        try a.start()
        try b.start()
        let writer = try a.client()
        let documents = generatedDocuments(2000)
        #expect(try writer.request("import", ["docs": .array(documents)])["ok"] == .bool(true))
        try a.allow(b)
        try b.allow(a)
        try poll("b to hold every document") { try b.documentCount() == 2000 }
        #expect(try b.ctl(["sync", a.nodeID, "--wait"]).status == 0)
        let firstRun = try b.bytesReceived()

        b.signal(SIGTERM)
        try waitForExit(b.process)
        #expect(b.process.terminationStatus == 0)
        try b.restart()
        let resumed = try b.ctl(["sync", a.nodeID, "--wait"])
        #expect(resumed.status == 0, "\(resumed.stderr)")
        // Starting over would move every document's changes entry again; resuming from the
        // checkpoint moves only the handshake and the checkpoint exchange.
        let secondRun = try b.bytesReceived()
        #expect(secondRun * 10 < firstRun, "first run \(firstRun) bytes, after restart \(secondRun) bytes")
    }
}

extension AgentProcess {
    /// `peer_bytes_received` from `stats`.
    func bytesReceived() throws -> Int64 {
        guard case .int(let bytes)? = try client().request("stats")["peer_bytes_received"] else { return -1 }
        return bytes
    }
}
