import CanopyAgent
import CanopyCore
import Foundation
import Testing

/// Writes naming a revision that is no longer current, with real agents: refused (exit 3) for a
/// document no rule covers, kept as a branch for the rule to settle for one a rule covers — a
/// `put` and a `delete` alike.
@Suite("stale writes under rules, with a real agent", .serialized)
struct StaleWritesEndToEndTests {
    /// A document written twice: returns its first (now stale) revision.
    private static func editedTwice(_ agent: AgentProcess, _ id: String, _ body: [String: JSONValue]) throws -> String {
        let first = try agent.put(id, body)
        var second = body
        second["n"] = .int(2)
        try agent.put(id, second, replacing: first)
        return first
    }

    @Test("a stale delete of a document a rule covers (by id or by its body's field) is kept as a branch and settled by the rule, as a stale put is; without a rule it is refused")
    func staleDeleteBranchesUnderARule() throws {
        let agent = try AgentProcess(initArguments: ["--listen", "127.0.0.1:0", "--conflicts", "manual"])
        try agent.appendConfig("""
            [rule notes]
            prefix = note:
            strategy = automatic

            [rule tasks]
            value = task
            strategy = automatic
            """)
        try agent.start()

        // Covered by the id prefix: the deletion is kept beside the edit, and the rule
        // (automatic: a deletion wins) deletes the document.
        let staleNote = try Self.editedTwice(agent, "note:1", ["n": .int(1)])
        let deleted = try agent.ctl(["delete", "note:1", "--rev", staleNote])
        #expect(deleted.status == 0, "\(deleted.stdout) \(deleted.stderr)")
        #expect(deleted.stdout.contains("kept as a conflicting branch"), "\(deleted.stdout)")
        #expect(try agent.value(of: "note:1", "_deleted") == .bool(true))
        // Deleted already: nothing for another deletion to conflict with, so it is refused.
        #expect(try agent.ctl(["delete", "note:1", "--rev", staleNote]).status == 3)

        // Covered by the current body's field (`type` = task); the JSON reply says it branched.
        let staleTask = try Self.editedTwice(agent, "t1", ["type": .string("task"), "n": .int(1)])
        let reply = try agent.client().request("delete", ["doc": .string("t1"), "rev": .string(staleTask)])
        #expect(reply["ok"] == .bool(true) && reply["branched"] == .bool(true), "\(reply)")
        guard case .string(let current)? = reply["current"], case .string(let written)? = reply["rev"] else {
            Issue.record("no current or rev in \(reply)")
            return
        }
        #expect(written.hasPrefix("2-") && current == written, "the deletion, a child of the stale revision, won by the rule")
        #expect(try agent.value(of: "t1", "_deleted") == .bool(true))

        // The same stale put branches too (for comparison), and nothing is left conflicted.
        let stalePut = try Self.editedTwice(agent, "note:2", ["n": .int(1)])
        let put = try agent.ctl(["put", "note:2", "--rev", stalePut, "--body", #"{"n":3}"#])
        #expect(put.status == 0 && put.stdout.contains("kept as a conflicting branch"), "\(put)")
        #expect(try agent.client().request("status")["conflicted_count"] == .int(0))

        // No rule covers it (the catch-all is not a rule): refused, exit 3, for both.
        let plain = try Self.editedTwice(agent, "plain", ["n": .int(1)])
        #expect(try agent.ctl(["delete", "plain", "--rev", plain]).status == 3)
        #expect(try agent.ctl(["put", "plain", "--rev", plain, "--body", #"{"n":3}"#]).status == 3)
        #expect(try agent.value(of: "plain", "n") == .int(2))
    }
}
