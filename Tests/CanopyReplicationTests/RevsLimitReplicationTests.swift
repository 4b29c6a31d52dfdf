import CanopyCore
import CanopyReplication
import CanopySimulation
import CanopyStore
import Testing

@Suite("Replication across revsLimit cuts")
struct RevsLimitReplicationTests {
    /// Edits `doc` on `store` `count` times from `revision` (nil: creates it), returning the revisions.
    private func edits(_ store: DocumentStore, from revision: RevisionID?, count: Int) throws -> [RevisionID] {
        var current = revision
        var made: [RevisionID] = []
        for step in 0..<count {
            let next = try store.put(id: "doc", body: .object(["step": .int(Int64(step)), "after": .string(current?.description ?? "")]),
                                     replacing: current)
            made.append(next)
            current = next
        }
        return made
    }

    /// The current revision of `doc` and its conflicting revisions.
    private func openLeaves(_ store: DocumentStore) throws -> [RevisionID] {
        let document = try store.get(id: "doc", options: [.conflicts])
        return [document.revision] + (document.conflicts ?? [])
    }

    @Test("a peer with a lower revsLimit accepts the whole history and stems it to its own limit")
    func lowerPeerLimit() throws {
        let harness = try ReplicationHarness(seed: 41)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b", revsLimit: 3)
        let made = try edits(a.store, from: nil, count: 10)
        harness.connect(a, b)
        #expect(harness.runUntilQuiescent())
        #expect(try harness.divergences() == [])
        let document = try b.store.get(id: "doc", options: [.revisions])
        #expect(document.revision == made[9])
        // B keeps its three newest revisions; the oldest kept still names its parent as a fact.
        #expect(document.history == [made[9], made[8], made[7]])
        #expect(b.events.allSatisfy { $0.kind != .rejected })
    }

    /// The failure the simulator found (seed 3145): B holds 3 and 4 from a path cut at revsLimit 2,
    /// then receives 2 — 3's parent — from C as C's leaf. Without the cut path's link B would
    /// see 2 as a second open leaf, a conflict no other node has, and nothing would ever send the
    /// link again.
    @Test("a revision first seen as the oldest of a cut path is linked to its parent when the parent arrives later")
    func cutLinkSurvives() throws {
        let harness = try ReplicationHarness(seed: 42)
        let a = try harness.addNode("a", revsLimit: 2)
        let b = try harness.addNode("b", revsLimit: 2)
        let c = try harness.addNode("c", revsLimit: 2)
        let first = try edits(a.store, from: nil, count: 2)
        harness.connect(a, c)
        #expect(harness.runUntilQuiescent())
        harness.dropSessions(of: a)
        harness.dropSessions(of: c)

        let later = try edits(a.store, from: first[1], count: 2)
        harness.connect(a, b)
        #expect(harness.runUntilQuiescent())
        harness.dropSessions(of: a)
        harness.dropSessions(of: b)
        // B holds 4 and 3 (its limit), and knows 3's parent is 2 without holding 2.
        #expect(try openLeaves(b.store) == [later[1]])

        harness.connect(c, b)
        #expect(harness.runUntilQuiescent())
        #expect(try harness.divergences() == [])
        for node in [a, b, c] {
            // One leaf, and no closing tombstone: no node ever saw a conflict to resolve.
            #expect(try node.store.changes(since: 0).first?.leaves.map(\.revision) == [later[1]], "\(node.name)")
            #expect(!node.events.contains { $0.kind == .conflictResolved }, "\(node.name)")
        }
        #expect(try c.store.get(id: "doc").revision == later[1])
    }
    /// The failure the simulator found (seed 5173): A stemmed a deletion that B still held as its
    /// leaf. A's later edits reached B with a history that stopped short of the deletion, so B
    /// saw the deletion and A's edit as two open leaves, deletes won, and B closed the edit that
    /// every other node held as current. With peer horizons A keeps what B holds and reaches it.
    @Test("a deletion a peer still holds is not stemmed and the peer links the next edits to it")
    func peerHeldDeletionLinked() throws {
        let harness = try ReplicationHarness(seed: 43)
        let a = try harness.addNode("a", revsLimit: 2)
        let b = try harness.addNode("b", revsLimit: 2)
        let base = try edits(a.store, from: nil, count: 2)
        let deleted = try a.store.delete(id: "doc", rev: base[1])
        harness.connect(a, b)
        #expect(harness.runUntilQuiescent())
        harness.dropSessions(of: a)
        harness.dropSessions(of: b)
        #expect(try b.store.changes(since: 0).first?.leaves.map(\.revision) == [deleted])
        #expect(a.store.peerHorizons.count == 1)

        // A re-creates the document on top of the deletion and edits it further than revsLimit.
        let revived = try edits(a.store, from: deleted, count: 4)
        #expect(try a.store.revisionTree(id: "doc")?.contains(deleted) == true)

        harness.connect(a, b)
        #expect(harness.runUntilQuiescent())
        #expect(try harness.divergences() == [])
        for node in [a, b] {
            #expect(try node.store.changes(since: 0).first?.leaves.map(\.revision) == [revived[3]], "\(node.name)")
            #expect(!node.events.contains { $0.kind == .conflictResolved }, "\(node.name)")
            #expect(try node.store.get(id: "doc").revision == revived[3], "\(node.name)")
        }
    }
}
