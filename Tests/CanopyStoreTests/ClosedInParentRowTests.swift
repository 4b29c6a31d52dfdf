import CanopyCore
import Testing
@testable import CanopyStore

/// Closing tombstones kept in their parents' rows (`RevisionRows`, "Closing tombstones").
@Suite("Closing tombstones in their parents' rows")
struct ClosedInParentRowTests {
    /// A store where B's edit `local` lost to a peer's two-generation branch under `automatic`.
    struct Settled {
        let test: TestStore
        let first: RevisionID
        let local: RevisionID
        let winner: RevisionID
        var closing: RevisionID { ConflictResolution.closing(local).id }

        init(_ configuration: DocumentStore.Configuration = .init()) throws {
            test = try TestStore(configuration)
            first = try test.store.put(id: "doc", body: body(1), replacing: nil)
            local = try test.store.put(id: "doc", body: body(2, "local"), replacing: first)
            let remote2 = try foreign("doc", parentPath: [first], body: body(2, "remote"))
            let remote3 = try foreign("doc", parentPath: [remote2.path.leaf, first], body: body(3, "remote"))
            let result = try test.store.bulkInsertForeign([remote3])[0]
            winner = remote3.path.leaf
            #expect(result.resolution == .resolved)
            #expect(result.added.contains(ConflictResolution.closing(local).id))
        }

        func rowCount() throws -> Int64 { try Database(path: test.path).scalarInt("SELECT count(*) FROM revisions") ?? -1 }

        /// What reads make of the document: its tree, the closing tombstone as a revision, what a
        /// peer is sent for it, and whether the store holds it.
        func reads() throws -> [String] {
            let store = test.store
            let tree = try #require(try store.revisionTree(id: "doc"))
            let closed = try store.get(id: "doc", rev: closing)
            let sent = try store.revisionsToSend([RevisionRequest(documentID: "doc", revisions: [closing, winner], knownAncestors: [])])
            let db = try Database(path: test.path)
            let key = try #require(try db.scalarInt("SELECT doc_key FROM documents WHERE doc_id = 'doc'"))
            return [
                tree.sortedNodes.map { "\($0.id)<\($0.parent.map(String.init(describing:)) ?? "-")>\($0.kind)" }.joined(separator: " "),
                tree.leaves.map(\.id.description).joined(separator: " "),
                "\(closed.kind) \(closed.body)",
                sent.map { "\($0.path.leaf) \($0.path.kind) \($0.path.ancestors.map(\.description)) \(ClosedInParentRowTests.text($0.body))" }.joined(separator: " / "),
                "\(try RevisionRows.holdsRevision(db, key: key, revision: closing))",
                "\(try store.conflictedCount) \(try store.get(id: "doc").revision)",
            ]
        }
    }

    /// A sent body as text.
    static func text(_ body: ForeignRevision.Body) -> String {
        switch body {
        case .canonical(let bytes): return String(decoding: bytes, as: UTF8.self)
        case .value(let value): return String(decoding: CanonicalJSON.encode(value), as: UTF8.self)
        }
    }

    @Test("a resolution keeps the closing tombstone in the losing leaf's row, and every read sees it as a revision")
    func keptInParentRow() throws {
        let settled = try Settled()
        #expect(try settled.rowCount() == 4, "first, local, the peer's two: no row for the closing tombstone")
        let db = try Database(path: settled.test.path)
        let child = try db.queryFirst("SELECT closed_child FROM revisions WHERE digest = ?", [.blob(settled.local.digest)]) { $0.blob(0) }
        #expect(child == settled.closing.digest)
        let tree = try #require(try settled.test.store.revisionTree(id: "doc"))
        #expect(tree.node(settled.closing)?.kind == .closed)
        #expect(tree.node(settled.closing)?.parent == settled.local)
        #expect(tree.isLeaf(settled.closing) && !tree.isLeaf(settled.local) && !tree.isConflicted)
        let reads = try settled.reads()
        #expect(reads[2] == "closed \(JSONValue.emptyObject)")
        #expect(reads[3].hasPrefix("\(settled.closing) closed \([settled.local.description, settled.first.description]) {}"))
        #expect(reads[4] == "true")

        // A peer that receives what this store sends holds the same rows.
        let peer = try TestStore()
        let sent = try settled.test.store.revisionsToSend([
            RevisionRequest(documentID: "doc", revisions: [settled.closing, settled.winner], knownAncestors: [])
        ])
        _ = try peer.store.bulkInsertForeign(sent)
        #expect(try storeRows(peer.path).filter { !$0.isEmpty }.count == 1 + 4)
        #expect(try peer.store.revisionTree(id: "doc") == settled.test.store.revisionTree(id: "doc"))
        let peerChild = try Database(path: peer.path).queryFirst(
            "SELECT closed_child FROM revisions WHERE digest = ?", [.blob(settled.local.digest)]) { $0.blob(0) }
        #expect(peerChild == settled.closing.digest)
    }

    @Test("a closing tombstone written as a row of its own, as files from before hold it, reads and updates alike")
    func rowOfItsOwnReadsAlike() throws {
        let settled = try Settled()
        let expected = try settled.reads()
        let db = try Database(path: settled.test.path)
        let key = try #require(try db.scalarInt("SELECT doc_key FROM documents WHERE doc_id = 'doc'"))
        try db.run(
            "INSERT INTO revisions(doc_key, generation, digest, parent, kind, leaf, body) VALUES (?, ?, ?, ?, 3, 1, X'7B7D')",
            .integer(key), .integer(Int64(settled.closing.generation)), .blob(settled.closing.digest), .blob(settled.local.digest))
        try db.run("UPDATE revisions SET closed_child = NULL WHERE digest = ?", .blob(settled.local.digest))
        #expect(try settled.rowCount() == 5)
        #expect(try settled.reads() == expected)
        // An edit of the winner rewrites neither form, and the tree stays whole.
        let next = try settled.test.store.put(id: "doc", body: body(4), replacing: settled.winner)
        let tree = try #require(try settled.test.store.revisionTree(id: "doc"))
        #expect(tree.leaves.map(\.id).sorted() == [settled.closing, next].sorted())
        #expect(try settled.rowCount() == 6)
    }

    @Test("a closing tombstone whose parent's row goes gets a row of its own")
    func parentRowGoesGivesARow() throws {
        // Stemming keeps every leaf's parent (revsLimit is at least 2), so this takes the
        // parent away below the store's API, as a tree stemmed to one revision per leaf would.
        let settled = try Settled()
        try settled.test.store.write { context in
            var document = try #require(try RevisionRows.load(context.db, documentID: "doc"))
            document.touched.append(contentsOf: document.tree.stem(limit: 1))
            try RevisionRows.persist(context, &document)
        }
        let tree = try #require(try settled.test.store.revisionTree(id: "doc"))
        #expect(tree.leaves.map(\.id).sorted() == [settled.closing, settled.winner].sorted())
        #expect(!tree.contains(settled.local), "stemmed")
        let db = try Database(path: settled.test.path)
        let row = try db.queryFirst("SELECT kind, leaf, body, parent FROM revisions WHERE digest = ?", [.blob(settled.closing.digest)]) {
            [$0.int(0), $0.int(1)].map(String.init) + [$0.blob(2).map { String(decoding: $0, as: UTF8.self) } ?? "null"]
                + [$0.blob(3) == settled.local.digest ? "parent link kept" : "no parent link"]
        }
        #expect(row == ["3", "1", "{}", "parent link kept"])
        #expect(try db.scalarInt("SELECT count(*) FROM revisions WHERE closed_child IS NOT NULL") == 0)
        #expect(try settled.rowCount() == 2)
        #expect(try settled.test.store.get(id: "doc", rev: settled.closing).kind == .closed)
    }

    @Test("a closing tombstone under a revision known only by name stays readable when that revision arrives closed")
    func parentArrivesClosedLater() throws {
        let test = try TestStore()
        let first = try test.store.put(id: "doc", body: body(1), replacing: nil)
        let closing = ConflictResolution.closing(first).id
        let closingOfClosing = ConflictResolution.closing(closing).id
        // A peer sends the tombstone of a tombstone with its history: `closing` is recorded by
        // name (`.live`, no body) and holds the new tombstone in its row.
        let deeper = try foreign("doc", parentPath: [closing, first], kind: .closed, body: .emptyObject)
        #expect(deeper.path.leaf == closingOfClosing)
        _ = try test.store.bulkInsertForeign([deeper])
        let db = try Database(path: test.path)
        let holder = try db.queryFirst("SELECT kind, closed_child FROM revisions WHERE digest = ?", [.blob(closing.digest)]) {
            ($0.int(0), $0.blob(1))
        }
        #expect(holder?.0 == Int(RevisionKind.live.rawValue) && holder?.1 == closingOfClosing.digest)
        // Then `closing` itself arrives: its row becomes a closing tombstone's, still holding its child.
        _ = try test.store.bulkInsertForeign([try foreign("doc", parentPath: [first], kind: .closed, body: .emptyObject)])
        let after = try db.queryFirst("SELECT kind, closed_child FROM revisions WHERE digest = ?", [.blob(closing.digest)]) {
            ($0.int(0), $0.blob(1))
        }
        #expect(after?.0 == Int(RevisionKind.closed.rawValue) && after?.1 == closingOfClosing.digest)
        let tree = try #require(try test.store.revisionTree(id: "doc"))
        #expect(tree.node(closing)?.kind == .closed && tree.node(closingOfClosing)?.parent == closing)
        #expect(try test.store.get(id: "doc", rev: closingOfClosing).kind == .closed)
        let sent = try test.store.revisionsToSend([
            RevisionRequest(documentID: "doc", revisions: [closingOfClosing], knownAncestors: [])
        ])
        #expect(sent.map(\.path.leaf) == [closingOfClosing])
        // And the document still takes writes.
        _ = try test.store.bulkInsertForeign([try foreign("doc", parentPath: [first], body: body(2))])
        #expect(try test.store.revisionTree(id: "doc")?.count == 4)
    }
}
