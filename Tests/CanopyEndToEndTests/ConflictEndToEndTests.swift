import CanopyAgent
import CanopyCore
import Foundation
import Testing

/// Two generation-1 revisions of the same document: a conflict, once both are imported.
private func conflictingImport(_ id: String) -> String {
    let first = #"{"_id":"\#(id)","_rev":"1-\#(String(repeating: "a", count: 32))","side":"a"}"#
    let second = #"{"_id":"\#(id)","_rev":"1-\#(String(repeating: "b", count: 32))","side":"b"}"#
    return #"{"docs":[\#(first),\#(second)],"new_edits":false}"#
}

private func conflictCount(_ agent: AgentProcess) throws -> Int {
    guard case .array(let rows)? = try agent.client().request("conflicts")["conflicts"] else { return -1 }
    return rows.count
}

@Suite("conflicts through the admin socket", .serialized)
struct ConflictEndToEndTests {
    @Test("resolve by picking a leaf ends the conflict; canopyctl shows it before and not after")
    func resolveByPick() throws {
        let agent = try AgentProcess(initArguments: ["--listen", "127.0.0.1:0", "--conflicts", "manual"])
        try agent.start()
        #expect(try agent.ctl(["import", "-"], stdin: conflictingImport("c1")).status == 0)
        #expect(try conflictCount(agent) == 1)
        let listed = try agent.ctl(["conflicts"])
        let lines = listed.stdout.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true) }
        #expect(lines.first == ["DOCUMENT", "CURRENT", "KEPT", "FOR", "CONFLICTING"], "\(listed.stdout)")
        #expect(lines.dropFirst().first?.first == "c1" && lines.dropFirst().first?.dropFirst(2).first == "resolve", "\(listed.stdout)")
        let loser = "1-" + String(repeating: "a", count: 32)
        let resolved = try agent.ctl(["resolve", "c1", "--pick", loser])
        #expect(resolved.status == 0, "\(resolved.stderr)")
        #expect(try conflictCount(agent) == 0)
        #expect(try agent.value(of: "c1", "side") == .string("a"))
        #expect(try agent.ctl(["resolve", "c1", "--delete"]).status == 1)  // no conflict left: not_conflicted
    }

    @Test("a resolver client gets each conflict and its answer is applied")
    func resolverClientAnswers() throws {
        let agent = try AgentProcess(initArguments: ["--listen", "127.0.0.1:0", "--conflicts", "manual"])
        try agent.start()
        #expect(try agent.ctl(["import", "-"], stdin: conflictingImport("r1")).status == 0)
        let resolver = try agent.client()
        #expect(try resolver.request("resolver.register", ["prefix": .string("r")])["ok"] == .bool(true))
        var question: [String: JSONValue] = [:]
        while question.isEmpty {
            if case .object(let asked)? = try resolver.readObject()["resolve"] { question = asked }
        }
        #expect(question["doc"] == .string("r1"))
        guard case .array(let leaves)? = question["leaves"] else {
            Issue.record("no leaves in \(question)")
            return
        }
        #expect(leaves.count == 2)
        let answer = try resolver.request("resolver.answer", [
            "ticket": question["ticket"] ?? .null, "body": .object(["side": .string("merged")]),
        ])
        #expect(answer["ok"] == .bool(true), "\(answer)")
        #expect(try conflictCount(agent) == 0)
        #expect(try agent.value(of: "r1", "side") == .string("merged"))
    }

    @Test("a resolver that disconnects without answering leaves the conflict in place")
    func resolverDisconnectKeepsConflict() throws {
        let agent = try AgentProcess(initArguments: ["--listen", "127.0.0.1:0", "--conflicts", "manual"])
        try agent.start()
        #expect(try agent.ctl(["import", "-"], stdin: conflictingImport("k1")).status == 0)
        do {
            let resolver = try agent.client()
            _ = try resolver.request("resolver.register")
            while try resolver.readObject()["resolve"] == nil {}
        }  // the client is closed here, with its question unanswered
        try poll("the resolver registration to go away") {
            // A new client can register once the old one is gone.
            try agent.client().request("resolver.register")["ok"] == .bool(true)
        }
        #expect(try conflictCount(agent) == 1)
    }
}
