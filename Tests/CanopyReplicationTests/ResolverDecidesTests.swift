import CanopyCore
import CanopyReplication
import CanopySimulation
import CanopyStore
import Testing

/// Which side decides a conflict when one side's replicator has a resolver of its own and the
/// other settles conflicts by its database's policy: the resolver, always, as Couchbase Lite's
/// client resolver decides for its pulls (`Hello.pullsFirstFeature`).
@Suite("a replicator's own resolver decides the conflicts of its connection")
struct ResolverDecidesTests {
    @Test("the side with its own resolver pulls before it serves the peer, so the peer never sees the conflict and its policy never settles it, whatever the message order", arguments: 1...12)
    func resolverSideDecides(seed: UInt64) throws {
        let harness = try ReplicationHarness(seed: seed)
        let a = try harness.addNode("a")  // the default policy: automatic
        let b = try harness.addNode("b")
        let ids = (0..<10).map { "doc-\($0)" }
        for id in ids {
            let base = try a.store.put(id: id, body: .object(["v": .int(0)]), replacing: nil)
            #expect(try b.store.put(id: id, body: .object(["v": .int(0)]), replacing: nil) == base)
            _ = try a.store.put(id: id, body: .object(["v": .int(1), "on": .string("a")]), replacing: base)
            _ = try b.store.put(id: id, body: .object(["v": .int(2), "on": .string("b")]), replacing: base)
        }
        var resolving = ReplicationConfiguration(continuous: false)
        resolving.conflictPolicy = .custom(BuiltInResolver.mergeJSON)
        harness.connect(a, b, configuration: ReplicationConfiguration(), configurationB: resolving)
        #expect(harness.runUntilQuiescent())
        #expect(!a.events.contains { $0.kind == .conflictDetected }, "seed \(seed): a never sees the conflict: \(a.events.filter { $0.kind == .conflictDetected }.count)")
        #expect(b.events.filter { $0.kind == .conflictResolved }.count == ids.count, "seed \(seed)")
        #expect(try harness.divergences() == [])
        #expect(try a.store.conflictedDocumentIDs().isEmpty)
    }
}
