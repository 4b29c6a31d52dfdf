import CanopyCore
import CanopyReplication
import CanopySimulation
import CanopyStore
import Testing

@Suite("Replication through a mesh")
struct MeshReplicationTests {
    @Test("in a line A–B–C, A's edits reach C through B")
    func line() throws {
        let harness = try ReplicationHarness(seed: 21)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        let c = try harness.addNode("c")
        try writeDocuments(a.store, prefix: "a", count: 300)
        try writeDocuments(c.store, prefix: "c", count: 50)
        harness.connect(a, b)
        harness.connect(b, c)
        #expect(harness.runUntilQuiescent())
        #expect(try harness.divergences() == [])
        #expect(try c.store.documentCount == 350)
        // A later edit on A travels the line too (continuous mode: B re-announces what it received).
        let current = try a.store.get(id: "a-1").revision
        let edited = try a.store.put(id: "a-1", body: .object(["v": .int(2)]), replacing: current)
        #expect(harness.runUntilQuiescent())
        #expect(try c.store.get(id: "a-1").revision == edited)
    }

    @Test("a triangle of nodes converges with edits from every corner")
    func triangle() throws {
        let harness = try ReplicationHarness(seed: 22)
        let nodes = try ["a", "b", "c"].map { try harness.addNode($0) }
        for node in nodes { try writeDocuments(node.store, prefix: node.name, count: 200) }
        harness.connect(nodes[0], nodes[1])
        harness.connect(nodes[1], nodes[2])
        harness.connect(nodes[2], nodes[0])
        #expect(harness.runUntilQuiescent())
        #expect(try harness.divergences() == [])
        for node in nodes { #expect(try node.store.documentCount == 600) }
    }
}

@Suite("Conflicts resolved on receipt")
struct ConflictReplicationTests {
    /// Two nodes that share `doc` at one revision, then disconnect.
    private func sharedDocument(_ harness: ReplicationHarness, _ nodes: [ReplicationHarness.Node]) throws -> RevisionID {
        let base = try nodes[0].store.put(id: "doc", body: .object(["title": .string("base"), "n": .int(0)]), replacing: nil)
        for node in nodes.dropFirst() {
            _ = try node.store.bulkInsertForeign([ForeignRevision(documentID: "doc", path: try RevisionPath(leaf: base, kind: .live), body: .value(.object(["title": .string("base"), "n": .int(0)])))])
        }
        return base
    }

    /// Applies `count` edits to `doc` on `store`, returning the last revision.
    private func edit(_ store: DocumentStore, from revision: RevisionID, count: Int, tag: String) throws -> RevisionID {
        var current = revision
        for step in 0..<count {
            current = try store.put(id: "doc", body: .object(["title": .string(tag), "n": .int(Int64(step + 1))]), replacing: current)
        }
        return current
    }

    @Test("concurrent edits on two nodes: the longer edit chain wins everywhere, no conflict left")
    func twoNodes() throws {
        let harness = try ReplicationHarness(seed: 31)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        let base = try sharedDocument(harness, [a, b])
        let long = try edit(a.store, from: base, count: 3, tag: "a")
        _ = try edit(b.store, from: base, count: 1, tag: "b")
        harness.connect(a, b)
        #expect(harness.runUntilQuiescent())
        #expect(try harness.divergences() == [])
        #expect(try a.store.get(id: "doc").revision == long)
        #expect(try a.store.conflictedCount == 0 && b.store.conflictedCount == 0)
        #expect(b.events.contains { $0.kind == .conflictResolved && $0.documentID == "doc" })
    }

    @Test("concurrent edits on three nodes converge to one winner")
    func threeNodes() throws {
        let harness = try ReplicationHarness(seed: 32)
        let nodes = try ["a", "b", "c"].map { try harness.addNode($0) }
        let base = try sharedDocument(harness, nodes)
        for (index, node) in nodes.enumerated() { _ = try edit(node.store, from: base, count: 2, tag: node.name + "\(index)") }
        harness.connect(nodes[0], nodes[1])
        harness.connect(nodes[1], nodes[2])
        #expect(harness.runUntilQuiescent())
        #expect(try harness.divergences() == [])
        for node in nodes { #expect(try node.store.conflictedCount == 0) }
    }

    @Test("an edit against a delete: the deletion wins on every node")
    func deleteWins() throws {
        let harness = try ReplicationHarness(seed: 33)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        let base = try sharedDocument(harness, [a, b])
        _ = try edit(a.store, from: base, count: 5, tag: "busy")
        let deletion = try b.store.delete(id: "doc", rev: base)
        harness.connect(a, b)
        #expect(harness.runUntilQuiescent())
        #expect(try harness.divergences() == [])
        for node in [a, b] {
            let document = try node.store.get(id: "doc")
            #expect(document.isDeleted)
            #expect(document.revision == deletion)
        }
    }

    @Test("a merging resolver combines both edits and both nodes write the same revision")
    func mergeResolver() throws {
        let harness = try ReplicationHarness(seed: 34)
        let a = try harness.addNode("a", policy: .custom(BuiltInResolver.mergeJSON))
        let b = try harness.addNode("b", policy: .custom(BuiltInResolver.mergeJSON))
        let base = try sharedDocument(harness, [a, b])
        _ = try a.store.put(id: "doc", body: .object(["title": .string("from a"), "n": .int(0)]), replacing: base)
        _ = try b.store.put(id: "doc", body: .object(["title": .string("base"), "n": .int(7)]), replacing: base)
        harness.connect(a, b)
        #expect(harness.runUntilQuiescent())
        #expect(try harness.divergences() == [])
        let merged = try a.store.get(id: "doc")
        #expect(merged.body == .object(["title": .string("from a"), "n": .int(7)]))
        #expect(merged.kind == .resolvedLive)
        #expect(try a.store.conflictedCount == 0 && b.store.conflictedCount == 0)
    }

    @Test("a resolver that throws keeps the conflict; after it is fixed the conflict is resolved and replicated")
    func throwingResolver() throws {
        struct Broken: Error {}
        let harness = try ReplicationHarness(seed: 35)
        let a = try harness.addNode("a", policy: .custom(ClosureResolver { _ in throw Broken() }))
        let b = try harness.addNode("b", policy: .manual)
        let base = try sharedDocument(harness, [a, b])
        _ = try edit(a.store, from: base, count: 1, tag: "a")
        _ = try edit(b.store, from: base, count: 1, tag: "b")
        harness.connect(a, b, configuration: ReplicationConfiguration(direction: .both))
        #expect(harness.runUntilQuiescent())
        #expect(try a.store.conflictedCount == 1)
        #expect(a.events.contains { $0.kind == .resolutionFailed && $0.documentID == "doc" })
        #expect(try harness.divergences() == [])
        // Fixed resolver: the retry pass settles it, and the resolution replicates to b.
        try a.reopen(configuration: .init(conflictPolicy: .custom(BuiltInResolver.remoteWins)))
        harness.dropSessions(of: a)
        _ = try a.store.retryConflictResolution()
        #expect(try a.store.conflictedCount == 0)
        harness.connect(a, b)
        #expect(harness.runUntilQuiescent())
        #expect(try harness.divergences() == [])
        #expect(try b.store.conflictedCount == 0)
    }

    @Test("manual mode keeps conflicts until resolveConflicts, and the resolution replicates")
    func manualMode() throws {
        let harness = try ReplicationHarness(seed: 36)
        let a = try harness.addNode("a", policy: .manual)
        let b = try harness.addNode("b", policy: .manual)
        let base = try sharedDocument(harness, [a, b])
        let revA = try edit(a.store, from: base, count: 1, tag: "a")
        _ = try edit(b.store, from: base, count: 1, tag: "b")
        harness.connect(a, b)
        #expect(harness.runUntilQuiescent())
        #expect(try a.store.conflictedDocumentIDs() == ["doc"])
        #expect(try b.store.conflictedDocumentIDs() == ["doc"])
        _ = try a.store.resolveConflicts(id: "doc", resolver: ClosureResolver { _ in .keep(revA) })
        #expect(harness.runUntilQuiescent())
        #expect(try harness.divergences() == [])
        #expect(try b.store.conflictedDocumentIDs() == [])
        #expect(try b.store.get(id: "doc").body == .object(["title": .string("a"), "n": .int(1)]))
    }

    @Test("resolvers that disagree on two nodes settle after one more round instead of looping")
    func nonDeterministicResolver() throws {
        let harness = try ReplicationHarness(seed: 37)
        let a = try harness.addNode("a", policy: .custom(BuiltInResolver.localWins))
        let b = try harness.addNode("b", policy: .custom(BuiltInResolver.localWins))
        let base = try sharedDocument(harness, [a, b])
        _ = try edit(a.store, from: base, count: 1, tag: "a")
        _ = try edit(b.store, from: base, count: 1, tag: "b")
        let connection = harness.connect(a, b)
        #expect(harness.runUntilQuiescent())
        #expect(try harness.divergences() == [])
        #expect(try a.store.conflictedCount == 0 && b.store.conflictedCount == 0)
        // Bounded traffic: a handful of messages, not an endless exchange.
        #expect(connection.link.ends.0.messagesSent < 40)
    }
}
