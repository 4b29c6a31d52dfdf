import Canopy
import CanopyStore
import CanopyCore
import Foundation
import Synchronization
import Testing

/// Makes `id` conflicted the way replication does: `base`, then `local` saved here on top of it,
/// then `remote` arriving from a peer as a child of `base` (through the store underneath, whose
/// `bulkInsertForeign` is what a replicator calls). Returns the local and remote revisions.
@discardableResult
func makeConflict(
    _ db: Canopy.Database, _ id: String, base: JSONValue, local: JSONValue, remote: JSONValue
) throws -> (local: RevisionID, remote: RevisionID) {
    let first = try db.save(json: base, id: id)
    let mine = try db.save(json: local, id: id, replacing: first)
    let theirs = RevisionHasher.revisionID(parent: first, kind: .live, body: remote)
    try db.store.bulkInsertForeign([
        ForeignRevision(documentID: id, path: try RevisionPath(leaf: theirs, kind: .live, ancestors: [first]), body: .value(remote))
    ])
    return (mine, theirs)
}

@Suite("Database: conflicts from peers")
struct DatabaseConflictTests {
    /// Two people edit different fields of the same task on two devices; a rule merges notes
    /// field by field against their common ancestor, so neither edit is lost.
    @Test("a mergeJSON rule settles a conflict from a peer field by field as it arrives")
    func threeWayMergeRule() throws {
        let rules = ResolutionRules([ResolutionRule(name: "notes", fieldValue: "note", strategy: .mergeJSON)])
        let db = try TestDatabase(.init(conflictResolution: .rules(rules))).db
        try makeConflict(db, "task",
            base: .object(["type": .string("note"), "title": .string("Buy milk"), "done": .bool(false)]),
            local: .object(["type": .string("note"), "title": .string("Buy oat milk"), "done": .bool(false)]),
            remote: .object(["type": .string("note"), "title": .string("Buy milk"), "done": .bool(true)]))
        #expect(try db.conflictedDocumentIDs().isEmpty)
        #expect(try db.document(id: "task")?.body
            == .object(["type": .string("note"), "title": .string("Buy oat milk"), "done": .bool(true)]))
    }

    @Test("a kept conflict is listed and settled by resolveConflicts with the same merge")
    func manualThenMerge() throws {
        let db = try TestDatabase(.init(conflictResolution: .manual)).db
        try makeConflict(db, "task",
            base: .object(["title": .string("Buy milk"), "done": .bool(false)]),
            local: .object(["title": .string("Buy oat milk"), "done": .bool(false)]),
            remote: .object(["title": .string("Buy milk"), "done": .bool(true)]))
        #expect(try db.conflictedDocumentIDs() == ["task"])
        let settled = try db.resolveConflicts(id: "task", resolver: BuiltInResolver.mergeJSON)
        #expect(try db.conflictedDocumentIDs().isEmpty)
        let document = try #require(try db.document(id: "task"))
        #expect(document.revision == settled)
        #expect(document.body == .object(["title": .string("Buy oat milk"), "done": .bool(true)]))
    }

    @Test("changing conflictResolution applies to the next conflict without reopening")
    func policyChange() throws {
        let db = try TestDatabase(.init(conflictResolution: .manual)).db
        try makeConflict(db, "a", base: .object(["v": .int(0)]), local: .object(["v": .int(1)]), remote: .object(["v": .int(2)]))
        db.conflictResolution = .automatic
        try makeConflict(db, "b", base: .object(["v": .int(0)]), local: .object(["v": .int(1)]), remote: .object(["v": .int(2)]))
        #expect(try db.conflictedDocumentIDs() == ["a"])
    }

    /// The resolver of Tools/canopyd/README.md (`newest`) deletes when a leaf is a deletion: under `.manual` an
    /// edit here against a deletion from a peer reaches it as two leaves, so it deletes.
    @Test("resolveConflicts shows an edit against a deletion as both leaves, the deletion marked, and a delete settles it")
    func editAgainstDeletion() throws {
        let db = try TestDatabase(.init(conflictResolution: .manual)).db
        let first = try db.save(json: .object(["title": .string("Buy milk")]), id: "task")
        let edit = try db.save(json: .object(["title": .string("Buy oat milk")]), id: "task", replacing: first)
        let gone = RevisionHasher.revisionID(parent: first, kind: .deleted, body: .object([:]))
        try db.store.bulkInsertForeign([
            ForeignRevision(documentID: "task", path: try RevisionPath(leaf: gone, kind: .deleted, ancestors: [first]), body: .value(.object([:])))
        ])
        #expect(try db.conflictedDocumentIDs() == ["task"])
        let seen = Mutex<[ConflictLeaf]>([])
        try db.resolveConflicts(id: "task", resolver: ClosureResolver { conflict in
            seen.withLock { $0 = conflict.leaves }
            if conflict.leaves.contains(where: \.isDeleted) { return .delete }
            return .keep(conflict.leaves[0].revision)
        })
        #expect(seen.withLock { $0.map(\.revision) } == [edit, gone], "the current (live) leaf first, then the deletion")
        #expect(seen.withLock { $0.map(\.isDeleted) } == [false, true])
        #expect(try db.conflictedDocumentIDs().isEmpty)
        #expect(try db.document(id: "task") == nil, "deleted")
    }

    @Test("resolving a document that does not exist says it is not found")
    func resolveMissing() throws {
        let db = try TestDatabase().db
        #expect(throws: DatabaseError.notFound(documentID: "ghost", revision: nil)) {
            try db.resolveConflicts(id: "ghost", resolver: BuiltInResolver.mergeJSON)
        }
    }

    /// `resolveConflicts(id:resolver:)`: the resolver sees the document id and every leaf still
    /// open, deleted ones marked (as a policy's resolver and the agent's resolver clients see
    /// them), and returns a merged body; it becomes a child of the winning leaf (by the node's
    /// rule over every open leaf), and every other leaf is ended, in one transaction.
    @Test("resolveConflicts with a closure sees the id and every open leaf, deleted ones marked; its merge extends the winner and ends the others")
    func resolveWithClosure() throws {
        let db = try TestDatabase(.init(conflictResolution: .manual)).db
        let (mine, theirs) = try makeConflict(db, "task",
            base: .object(["title": .string("Buy milk"), "done": .bool(false)]),
            local: .object(["title": .string("Buy oat milk"), "done": .bool(false)]),
            remote: .object(["title": .string("Buy milk"), "done": .bool(true)]))
        // A third leaf, deleted on another peer.
        let base = try #require(try db.store.get(id: "task", options: .revisions).history?.last)
        let gone = RevisionHasher.revisionID(parent: base, kind: .deleted, body: .object([:]))
        try db.store.bulkInsertForeign([
            ForeignRevision(documentID: "task", path: try RevisionPath(leaf: gone, kind: .deleted, ancestors: [base]), body: .value(.object([:])))
        ])
        let before = try db.store.get(id: "task", options: .conflicts)
        #expect(Set(before.conflicts ?? []).union([before.revision]) == [mine, theirs] && before.deletedConflicts == [gone])

        let seen = Mutex<(id: String, leaves: Set<RevisionID>, deleted: [RevisionID])?>(nil)
        let settled = try db.resolveConflicts(id: "task", resolver: ClosureResolver { conflict in
            seen.withLock { $0 = (conflict.documentID, Set(conflict.leaves.map(\.revision)), conflict.leaves.filter(\.isDeleted).map(\.revision)) }
            #expect(conflict.leaves.allSatisfy { $0.body != nil })
            return .merged(.object(["title": .string("Buy oat milk"), "done": .bool(true)]))
        })
        #expect(seen.withLock { $0?.id } == "task")
        #expect(seen.withLock { $0?.leaves } == [mine, theirs, gone], "every open leaf is offered")
        #expect(seen.withLock { $0?.deleted } == [gone], "the deletion is marked")
        let after = try db.store.get(id: "task", options: [.conflicts, .revisions])
        #expect(after.revision == settled && settled.generation == 3)
        // The winner by the node's rule among every open leaf is the deletion (deletes win): the
        // merge extends it, and the two live leaves are ended.
        #expect(after.history?.dropFirst().first == gone, "the merge is a child of the winning leaf")
        #expect((after.conflicts ?? []).isEmpty, "\(after)")
        #expect(after.body == .object(["title": .string("Buy oat milk"), "done": .bool(true)]))
        #expect(try db.conflictedDocumentIDs().isEmpty)
    }
}
