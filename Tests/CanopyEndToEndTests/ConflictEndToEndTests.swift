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

/// An edit and a deletion, both children of one first revision: an edit-versus-delete conflict
/// once both are imported (without `--couchdb` the deletion is a user's, not a settled branch).
/// Returns the `_bulk_docs` body and the two leaves.
private func editAgainstDeleteImport(_ id: String) -> (body: String, edit: String, deletion: String) {
    let root = String(repeating: "0", count: 32), edit = String(repeating: "c", count: 32), deletion = String(repeating: "d", count: 32)
    let edited = #"{"_id":"\#(id)","_rev":"2-\#(edit)","_revisions":{"start":2,"ids":["\#(edit)","\#(root)"]},"side":"edit"}"#
    let deleted = #"{"_id":"\#(id)","_rev":"2-\#(deletion)","_deleted":true,"_revisions":{"start":2,"ids":["\#(deletion)","\#(root)"]}}"#
    return (#"{"docs":[\#(edited),\#(deleted)],"new_edits":false}"#, "2-" + edit, "2-" + deletion)
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

    @Test("an edit against a deletion kept by manual lists its deleted leaf, and resolve settles it by either leaf, a body or delete")
    func editAgainstDeleteResolves() throws {
        let agent = try AgentProcess(initArguments: ["--listen", "127.0.0.1:0", "--conflicts", "manual"])
        try agent.start()
        let ids = ["keep-edit", "keep-deletion", "merged", "deleted"]
        var leaves: (edit: String, deletion: String) = ("", "")
        for id in ids {
            let made = editAgainstDeleteImport(id)
            leaves = (made.edit, made.deletion)
            let imported = try agent.ctl(["import", "-"], stdin: made.body)
            #expect(imported.status == 0, "\(imported.stderr)")
        }
        #expect(try conflictCount(agent) == 4)
        // The table names the deleted leaf as the conflicting one, marked.
        let listed = try agent.ctl(["conflicts"])
        for id in ids {
            let row = listed.stdout.split(separator: "\n").first { $0.hasPrefix(id + " ") }
            #expect(row?.contains(leaves.edit) == true && row?.contains("\(leaves.deletion) (deleted)") == true, "\(listed.stdout)")
        }
        let resolutions: [(String, [String])] = [
            ("keep-edit", ["--pick", leaves.edit]), ("keep-deletion", ["--pick", leaves.deletion]),
            ("merged", ["--body", #"{"side":"merged"}"#]), ("deleted", ["--delete"]),
        ]
        for (id, how) in resolutions {
            let resolved = try agent.ctl(["resolve", id] + how)
            #expect(resolved.status == 0, "resolve \(id) \(how): \(resolved.stdout) \(resolved.stderr)")
        }
        #expect(try conflictCount(agent) == 0)
        #expect(try agent.value(of: "keep-edit", "side") == .string("edit"))
        #expect(try agent.value(of: "merged", "side") == .string("merged"))
        for id in ["keep-deletion", "deleted"] {
            #expect(try agent.value(of: id, "_deleted") == .bool(true), "\(id) reads as deleted")
        }
        #expect(try agent.ctl(["resolve", "keep-edit", "--delete"]).status == 1)  // settled: not_conflicted
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
