import CanopyAgent
import CanopyCore
import Foundation
import Testing

/// CouchDB data whose documents are conflicted, imported with `canopyctl import --couchdb` into an
/// agent under the default policy (`automatic`): the conflicts are kept as CouchDB had them, as
/// CouchDB's own replicator keeps them, unless `--conflicts settle` asks the policy to settle them.
@Suite("CouchDB conflicts through import and export, with a real agent", .serialized)
struct CouchDBConflictsEndToEndTests {
    static let root = String(repeating: "0", count: 32)
    /// CouchDB's winner (the higher revision), its open conflict, and a branch CouchDB had settled
    /// by deleting it.
    static let winner = "2-" + String(repeating: "b", count: 32)
    static let loser = "2-" + String(repeating: "a", count: 32)
    static let settledBranch = "2-" + String(repeating: "c", count: 32)

    /// A CouchDB `_bulk_docs` dump of `id` with the three leaves above, children of one root.
    static func dump(_ id: String) -> String {
        func entry(_ rev: String, _ members: String) -> String {
            let digest = rev.dropFirst(2)
            return #"{"_id":"\#(id)","_rev":"\#(rev)","_revisions":{"start":2,"ids":["\#(digest)","\#(root)"]},\#(members)}"#
        }
        let docs = [entry(winner, #""side":"winner""#), entry(loser, #""side":"loser""#), entry(settledBranch, #""_deleted":true"#)]
        return #"{"new_edits":false,"docs":["# + docs.joined(separator: ",") + "]}"
    }

    /// `get ID --conflicts` as the agent answers it.
    static func document(_ agent: AgentProcess, _ id: String) throws -> [String: JSONValue] {
        let result = try agent.ctl(["get", id, "--conflicts"])
        return try JSONValue.parse(Data(result.stdout.utf8)).objectValue ?? [:]
    }

    /// The entries of `canopyctl export` for `id`, by revision.
    static func exported(_ agent: AgentProcess, _ id: String) throws -> [String: [String: JSONValue]] {
        let result = try agent.ctl(["export"])
        guard case .array(let docs)? = try JSONValue.parse(Data(result.stdout.utf8)).objectValue?["docs"] else { return [:] }
        var entries: [String: [String: JSONValue]] = [:]
        for case .object(let entry) in docs where entry["_id"] == .string(id) {
            if case .string(let rev)? = entry["_rev"] { entries[rev] = entry }
        }
        return entries
    }

    @Test("import --couchdb keeps CouchDB's open conflicts as they are under the default policy: get --conflicts and export show them, a restart keeps them, resolve settles them; --conflicts settle asks the policy instead")
    func couchConflictsKept() throws {
        let agent = try AgentProcess()   // conflicts = automatic
        try agent.start()
        let file = agent.temporary.path + "/couch.json"
        try Data(Self.dump("kept").utf8).write(to: URL(fileURLWithPath: file))
        let imported = try agent.ctl(["import", file, "--couchdb"])
        #expect(imported.status == 0, "\(imported.stderr)")

        // As CouchDB showed it: its winner current, the other live leaf in _conflicts.
        let kept = try Self.document(agent, "kept")
        #expect(kept["_rev"] == .string(Self.winner) && kept["side"] == .string("winner"), "\(kept)")
        #expect(kept["_conflicts"] == .array([.string(Self.loser)]), "\(kept)")
        // The export gives back the three leaves, the settled branch closed, and nothing else.
        let entries = try Self.exported(agent, "kept")
        #expect(Set(entries.keys) == [Self.winner, Self.loser, Self.settledBranch], "\(entries)")
        #expect(entries[Self.loser]?["_closed"] == nil && entries[Self.winner]?["_closed"] == nil)
        #expect(entries[Self.settledBranch]?["_closed"] == .bool(true))
        // Kept for `resolve`, also after a restart (whose scan of kept conflicts leaves it).
        let listed = try agent.ctl(["conflicts"]).stdout
        #expect(listed.split(separator: "\n").contains { $0.hasPrefix("kept ") && $0.contains(" resolve ") && $0.contains(Self.loser) }, "\(listed)")
        #expect(try agent.ctl(["shutdown"]).status == 0)
        try agent.restart()
        #expect(try Self.document(agent, "kept")["_conflicts"] == .array([.string(Self.loser)]))
        #expect(try agent.client().request("status")["conflicts_kept"] == .int(1))

        // Asked to, the policy settles the same data as a peer's revisions: the winner by the
        // automatic rule is current and the other leaves end with closing tombstones.
        try Data(Self.dump("settled").utf8).write(to: URL(fileURLWithPath: file))
        let settling = try agent.ctl(["import", file, "--couchdb", "--conflicts", "settle"])
        #expect(settling.status == 0, "\(settling.stderr)")
        let settled = try Self.document(agent, "settled")
        #expect(settled["_rev"] == .string(Self.winner) && settled["_conflicts"] == nil, "\(settled)")
        #expect(try Self.exported(agent, "settled").values.contains { $0["_closed"] == .bool(true) && $0["_rev"]?.stringValue?.hasPrefix("3-") == true })

        // The kept conflict is settled by hand like any other.
        let resolved = try agent.ctl(["resolve", "kept", "--pick", Self.loser])
        #expect(resolved.status == 0, "\(resolved.stderr)")
        #expect(try Self.document(agent, "kept")["side"] == .string("loser"))
        #expect(try agent.client().request("status")["conflicted_count"] == .int(0))
    }
}
