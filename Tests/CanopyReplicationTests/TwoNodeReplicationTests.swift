import CanopyCore
import CanopyReplication
import CanopySimulation
import CanopyStore
import Testing

/// Writes `count` documents `prefix-i` with a small body; returns their ids.
@discardableResult
func writeDocuments(_ store: DocumentStore, prefix: String, count: Int, batch: Int = 500) throws -> [String] {
    var ids: [String] = []
    var writes: [LocalWrite] = []
    for index in 0..<count {
        let id = "\(prefix)-\(index)"
        ids.append(id)
        writes.append(LocalWrite(documentID: id, body: .object(["n": .int(Int64(index)), "from": .string(prefix)]), replacing: nil))
        if writes.count == batch {
            _ = try store.putBatch(writes)
            writes = []
        }
    }
    if !writes.isEmpty { _ = try store.putBatch(writes) }
    return ids
}

@Suite("Two-node replication")
struct TwoNodeReplicationTests {
    @Test("two nodes replicate 10k documents both ways, then incremental edits, and converge")
    func bothWays() throws {
        let harness = try ReplicationHarness(seed: 11)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        try writeDocuments(a.store, prefix: "a", count: 5000)
        try writeDocuments(b.store, prefix: "b", count: 5000)
        harness.connect(a, b)
        #expect(harness.runUntilQuiescent())
        #expect(try harness.divergences() == [])
        #expect(try a.store.documentCount == 10_000)
        #expect(try b.store.documentCount == 10_000)

        // Incremental: edits on both sides flow at once in continuous mode.
        let doc = try a.store.get(id: "b-7")
        _ = try a.store.put(id: "b-7", body: .object(["edited": .bool(true)]), replacing: doc.revision)
        try writeDocuments(b.store, prefix: "late", count: 20)
        #expect(harness.runUntilQuiescent())
        #expect(try harness.divergences() == [])
        #expect(try b.store.get(id: "b-7").body == .object(["edited": .bool(true)]))
        #expect(try a.store.documentCount == 10_020)
    }

    @Test("the same edit made on two nodes replicates without any conflict")
    func identicalEdits() throws {
        let harness = try ReplicationHarness(seed: 12)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        let body: JSONValue = .object(["same": .int(1)])
        let revA = try a.store.put(id: "doc", body: body, replacing: nil)
        let revB = try b.store.put(id: "doc", body: body, replacing: nil)
        #expect(revA == revB)
        harness.connect(a, b)
        #expect(harness.runUntilQuiescent())
        #expect(try a.store.conflictedCount == 0 && b.store.conflictedCount == 0)
        #expect(try harness.divergences() == [])
    }
}
