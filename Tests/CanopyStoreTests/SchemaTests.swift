import CanopyCore
import Testing
@testable import CanopyStore

@Suite("Schema and migrations")
struct SchemaTests {
    @Test("a new file is created at the current version with a 16-byte id and the default revsLimit")
    func newFile() throws {
        let test = try TestStore()
        #expect(test.store.revsLimit == StoreLimits.revsLimitDefault)
        let db = try Database(path: test.path)
        #expect(try db.pragmaInt("user_version") == Int64(Schema.currentVersion))
        let reopened = try test.reopen()
        #expect(reopened.databaseID == test.store.databaseID)
        #expect(try TestStore().store.databaseID != test.store.databaseID)
    }

    @Test("an empty version-0 file is migrated to the current version")
    func migratesFromZero() throws {
        let directory = TemporaryDirectory()
        let db = try Database(path: directory.path("s.sqlite"))
        try db.execute("CREATE TABLE unrelated (x INTEGER)")
        #expect(try db.pragmaInt("user_version") == 0)
        let store = try DocumentStore(path: directory.path("s.sqlite"))
        try store.put(id: "a", body: body(1), replacing: nil)
        #expect(try db.pragmaInt("user_version") == Int64(Schema.currentVersion))
    }

    @Test("a version-1 file keeps its documents when migrated forward")
    func migratesFromOlderVersion() throws {
        let directory = TemporaryDirectory()
        let path = directory.path("s.sqlite")
        let db = try Database(path: path)
        try Schema.migrate(db, to: 1)
        #expect(try db.pragmaInt("user_version") == 1)
        // A document written by a version-1 build (rows as that schema holds them).
        let revision = RevisionHasher.revisionID(parent: nil, kind: .live, body: body(1))
        let tree = RevTree(nodes: [RevTree.Node(id: revision, parent: nil, kind: .live)])
        try db.run(
            """
            INSERT INTO documents(sequence, doc_key, doc_id, current_generation, current_digest, deleted, conflicted, leaves)
            VALUES (1, 1, 'old', 1, ?, 0, 0, ?)
            """, .blob(revision.digest),
            .blob(LeafList.encode(tree.leaves)))
        try db.run(
            "INSERT INTO revisions VALUES (1, 1, ?, NULL, 0, 1, ?)", .blob(revision.digest),
            .blob(CanonicalJSON.encode(body(1))))
        try db.run("INSERT INTO metadata VALUES ('database_id', ?), ('revs_limit', 1000), ('last_sequence', 1)", .blob(Array(repeating: 7, count: 16)))
        let store = try DocumentStore(path: path)
        #expect(try db.pragmaInt("user_version") == Int64(Schema.currentVersion))
        #expect(try store.get(id: "old").body == body(1))
        #expect(store.lastSequence == 1)
        // Version 8 gave the row its check value: the feed reads it and the row check finds it sound.
        #expect(try store.changes(since: 0).map(\.documentID) == ["old"])
        let rows = try store.checkRows()
        #expect(rows.documents == 1 && rows.damaged.isEmpty, "\(rows)")
        try store.localPut("settings", body: .object(["a": .int(1)]))
        #expect(try store.localGet("settings") == .object(["a": .int(1)]))
    }

    @Test("a file from a newer version is refused with a clear error and left untouched")
    func newerVersionRefused() throws {
        let directory = TemporaryDirectory()
        let path = directory.path("s.sqlite")
        let db = try Database(path: path)
        try db.execute("PRAGMA user_version = \(Schema.currentVersion + 1)")
        do {
            _ = try DocumentStore(path: path)
            Issue.record("a newer file was opened")
        } catch {
            guard case .schemaTooNew(_, let found, let supported) = error else {
                Issue.record("wrong error \(error)")
                return
            }
            #expect(found == Schema.currentVersion + 1)
            #expect(supported == Schema.currentVersion)
            #expect(error.description.contains("newer"))
        }
        #expect(try db.pragmaInt("user_version") == Int64(Schema.currentVersion + 1))
        #expect(try db.scalarInt("SELECT count(*) FROM sqlite_schema") == 0)
    }

    @Test("revsLimit is persisted in the file")
    func revsLimitPersisted() throws {
        let test = try TestStore(.init(revsLimit: 5))
        #expect(test.store.revsLimit == 5)
        #expect(try test.reopen().revsLimit == 5)
        try test.store.setRevsLimit(9)
        #expect(try test.reopen().revsLimit == 9)
    }
}
