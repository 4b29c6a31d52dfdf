import Canopy
import Foundation
import Testing

// Every Swift block of the DocC catalog's articles (Sources/Canopy/Canopy.docc), verbatim
// (checked below): they compile here, and the tests of `DocCExamplesTests` run them. The
// Embedding article's blocks stand in the test files that run them (EmbeddingExample.swift,
// NodeReplicationTests.swift, NodeClientEndToEndTests.swift, ReadmeSwiftBlocksTests.swift).

// MARK: GettingStarted.md

struct Todo: Codable, Equatable, Sendable {
    var title: String
    var done: Bool
}

func replicateTodos(in directory: String) async throws -> Todo? {
    let a = try Node(directory: directory + "/a")
    let b = try Node(directory: directory + "/b")
    try await a.database.save(Todo(title: "Water the plants", done: false), id: "todo:1")

    // A allows B and waits for it; B allows A and dials A's listener.
    a.replicator(ReplicatorConfiguration(peer: b.nodeID)).start()
    let replicator = b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: a.listenAddress))
    let status = replicator.status          // taken before start: sees every state
    replicator.start()
    for await state in status where state == .idle { break }   // caught up

    let todo = try await b.database.document(id: "todo:1", as: Todo.self)
    replicator.stop()
    await b.stop()
    await a.stop()
    return todo
}

func runOnePass(_ replicator: Replicator) async -> Bool {
    let status = replicator.status
    replicator.start()
    for await state in status {
        if state == .completed { return true }
        if case .failed = state { return false }
    }
    return false
}

func syncOnce(_ node: Node, with peer: Node) async throws -> Replicator.SyncOutcome {
    peer.replicator(ReplicatorConfiguration(peer: node.nodeID)).start()
    let configuration = ReplicatorConfiguration(peer: peer.nodeID, address: peer.listenAddress, continuous: false)
    let replicator = node.replicator(configuration)
    let outcome = try await replicator.sync()
    replicator.stop()
    return outcome
}

// MARK: DocumentsAndConflicts.md

func openTodos(at path: String) throws -> Database {
    try Database(path: path, configuration: Database.Configuration(conflictResolution: .manual, durable: true))
}

func finishTodo(in db: Database) throws -> Todo? {
    let first = try db.save(Todo(title: "Water the plants", done: false), id: "todo:1")
    try db.save(Todo(title: "Water the plants", done: true), id: "todo:1", replacing: first)
    do {
        // `first` is stale: this save throws and writes nothing.
        try db.save(Todo(title: "Water the ferns", done: false), id: "todo:1", replacing: first)
    } catch {
        if case .conflict(_, _, let current) = error { print("current:", current?.description ?? "none") }
    }
    // Saved on top of the current revision: the title changes, `done` goes back to false.
    try db.save(Todo(title: "Water the ferns", done: false), id: "todo:1", replacing: first, concurrency: .lastWriteWins)
    return try db.document(id: "todo:1", as: Todo.self)
}

func markDone(_ todo: Todo, id: String, basedOn revision: RevisionID, in db: Database) throws -> RevisionID {
    var done = todo
    done.done = true
    return try db.save(done, id: id, replacing: revision) { proposed, current in
        guard let current else { return nil }   // deleted meanwhile: give up
        return Todo(title: current.title, done: proposed.done)
    }
}

func deleteTodo(_ id: String, from db: Database) throws {
    guard let current = try db.document(id: id) else { return }
    try db.delete(id: id, revision: current.revision, concurrency: .lastWriteWins)
}

func settleKeptConflicts(in db: Database) throws -> [String] {
    let doneWins = ClosureResolver { conflict in
        let done = conflict.leaves.first { !$0.isDeleted && $0.body?.objectValue?["done"] == .bool(true) }
        return .keep(done?.revision ?? conflict.leaves[0].revision)
    }
    let ids = try db.conflictedDocumentIDs()
    for id in ids {
        try db.resolveConflicts(id: id, resolver: doneWins)
    }
    return ids
}

func firstChanges(of db: Database, count: Int) async throws -> [String] {
    var seen: [String] = []
    for try await change in db.changes(since: 0) {
        seen.append(change.deleted ? "deleted \(change.documentID)" : "\(change.documentID) \(change.current)")
        if seen.count == count { break }
    }
    return seen
}

// MARK: Replication.md

func statusLine(_ status: Replicator.Status) -> String {
    switch status {
    case .stopped: "stopped"
    case .offline: "offline, retrying"
    case .connecting: "connecting"
    case .idle: "up to date"
    case .busy(let progress): "\(progress.completed) of \(progress.total) changes"
    case .completed: "done"
    case .failed(let error): "failed: \(error.code)"
    }
}

func waitForPull(of id: String, in events: AsyncStream<ReplicatedDocument>) async -> RevisionID? {
    for await document in events where document.documentID == id && document.event == .pulled {
        return document.revision
    }
    return nil
}

func publishNotes(from a: Node, to b: Node) async throws -> (published: Database, received: Database) {
    let published = try await a.createDatabase("notes")
    let received = try await b.createDatabase("notes", conflicts: "merge-json")
    // B may read A's notes whose id starts with "public/"; A may write into B's.
    try await a.share("notes", with: b.nodeID, access: .read, prefix: "public/")
    try await b.share("notes", with: a.nodeID, access: .write)
    return (published, received)
}

func acceptPendingPeers(of node: Node) async throws -> [String] {
    for peer in try await node.pendingPeers() {
        try await node.allow(peer.nodeID)
    }
    return try await node.allowedPeers()
}

// MARK: ResolversAndRules.md

/// Deletions win; otherwise the leaf with the latest `updatedAt` (ISO 8601 text sorts by time).
struct NewestWins: ConflictResolver {
    func resolve(_ conflict: Conflict) throws -> ResolutionDecision {
        if conflict.leaves.contains(where: \.isDeleted) { return .delete }
        func updated(_ leaf: ConflictLeaf) -> String {
            if case .string(let time)? = leaf.body?.objectValue?["updatedAt"] { return time }
            return ""
        }
        return .keep(conflict.leaves.max { updated($0) < updated($1) }!.revision)
    }
}

/// The current leaf's body with the union of every live leaf's `tags`.
func unionOfTags(_ conflict: Conflict) -> ResolutionDecision {
    var tags: Set<String> = []
    for leaf in conflict.leaves where !leaf.isDeleted {
        if case .array(let values)? = leaf.body?.objectValue?["tags"] {
            for case .string(let tag) in values { tags.insert(tag) }
        }
    }
    var body = conflict.leaves[0].body?.objectValue ?? [:]
    body["tags"] = .array(tags.sorted().map { .string($0) })
    return .merged(.object(body))
}

func mergeTags(in db: Database) {
    db.conflictResolution = .custom(ClosureResolver(unionOfTags))
}

func openNotes(at path: String) throws -> Database {
    let rules = ResolutionRules([
        ResolutionRule(name: "notes", fieldValue: "note", strategy: .mergeJSON),
        ResolutionRule(name: "settings", idPrefix: "settings/", strategy: .resolver("newest")),
        ResolutionRule(name: "drafts", idPrefix: "drafts/", strategy: .manual),
    ], fallback: .automatic, resolvers: ["newest": NewestWins()])
    return try Database(path: path, configuration: Database.Configuration(conflictResolution: .rules(rules)))
}

func pullPreferringMine(into node: Node, from peer: Node) async throws {
    let keepMine = ClosureResolver { conflict in
        guard let mine = conflict.localRevision else { return .keep(conflict.leaves[0].revision) }
        return .keep(mine)
    }
    let configuration = ReplicatorConfiguration(
        peer: peer.nodeID, address: peer.listenAddress, direction: .pull, continuous: false,
        documentIDs: ["settings"], conflictResolution: .custom(keepMine))
    let replicator = node.replicator(configuration)
    try await replicator.sync()
    replicator.stop()
}

@Suite("The DocC catalog's examples", .serialized)
struct DocCExamplesTests {
    static let catalog = EmbeddingExampleTests.root.appendingPathComponent("Sources/Canopy/Canopy.docc")

    /// The ```swift blocks of every article of the catalog, by article file name.
    static func swiftBlocks() throws -> [(article: String, block: String)] {
        let articles = try FileManager.default.contentsOfDirectory(atPath: catalog.path).filter { $0.hasSuffix(".md") }.sorted()
        var blocks: [(String, String)] = []
        for article in articles {
            let text = try String(contentsOf: catalog.appendingPathComponent(article), encoding: .utf8)
            var from = text.startIndex
            while let open = text.range(of: "```swift\n", range: from..<text.endIndex) {
                let close = try #require(text.range(of: "\n```\n", range: open.upperBound..<text.endIndex), "\(article): a ```swift block is not closed")
                blocks.append((article, String(text[open.upperBound..<close.lowerBound])))
                from = close.upperBound
            }
        }
        return blocks
    }

    /// Makes `id` conflicted in `db`: `base`, then `local`'s members changed here and `remote`'s
    /// arriving from a peer (`makeConflict`).
    static func conflict(_ db: Database, _ id: String, base: [String: JSONValue], local: [String: JSONValue], remote: [String: JSONValue]) throws {
        try makeConflict(db, id, base: .object(base), local: .object(base.merging(local) { $1 }), remote: .object(base.merging(remote) { $1 }))
    }

    /// The Swift files of the test targets, by path: an article's block that needs a test target of
    /// its own (a real `canopyd`, as the Embedding article's `NodeClient` does) stands in that file.
    static func testSources() throws -> [(path: String, text: String)] {
        let tests = EmbeddingExampleTests.root.appendingPathComponent("Tests")
        let walk = try #require(FileManager.default.enumerator(at: tests, includingPropertiesForKeys: nil))
        var files: [(String, String)] = []
        for case let url as URL in walk where url.pathExtension == "swift" {
            files.append((url.path, try String(contentsOf: url, encoding: .utf8)))
        }
        return files.sorted { $0.0 < $1.0 }
    }

    @Test("every Swift block of every article is in this file, or in another test file, byte for byte")
    func everyBlockIsCompiledHere() throws {
        let source = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        let others = try Self.testSources()
        let blocks = try Self.swiftBlocks()
        #expect(blocks.count >= 19, "found only \(blocks.count) Swift blocks in \(Self.catalog.path)")
        for (article, block) in blocks where !source.contains(block) {
            #expect(others.contains { $0.text.contains(block) }, "a Swift block of \(article) differs from \(#filePath) and every other test file; copy one to the other:\n\(block)")
        }
    }

    // MARK: Getting started

    @Test("Getting started: B replicates A's todo and reads it as a Todo", .timeLimit(.minutes(5)))
    func gettingStarted() async throws {
        let directory = TemporaryDirectory()
        #expect(try await replicateTodos(in: directory.url.path) == Todo(title: "Water the plants", done: false))
    }

    @Test("Getting started: a one-shot replicator's pass completes and carries A's todo", .timeLimit(.minutes(5)))
    func onePass() async throws {
        try await NodeReplicationTests().withTwoNodes { a, b in
            try await a.database.save(Todo(title: "One pass", done: true), id: "todo:pass")
            a.replicator(ReplicatorConfiguration(peer: b.nodeID)).start()
            let replicator = b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: a.listenAddress, continuous: false))
            #expect(await runOnePass(replicator))
            #expect(try await b.database.document(id: "todo:pass", as: Todo.self) == Todo(title: "One pass", done: true))
            replicator.stop()
        }
    }

    @Test("Getting started: sync pushes and pulls once", .timeLimit(.minutes(5)))
    func syncOnceBothWays() async throws {
        try await NodeReplicationTests().withTwoNodes { a, b in
            try await a.database.save(Todo(title: "From A", done: false), id: "todo:a")
            try await b.database.save(Todo(title: "From B", done: false), id: "todo:b")
            let outcome = try await syncOnce(b, with: a)
            #expect(outcome.rejected == 0 && outcome.refusedByPeer == 0)
            #expect(try await b.database.document(id: "todo:a", as: Todo.self)?.title == "From A")
            #expect(try await a.database.document(id: "todo:b", as: Todo.self)?.title == "From B")
        }
    }

    // MARK: Documents and conflicts

    @Test("Documents and conflicts: the database opens with the manual policy")
    func openWithConfiguration() throws {
        let directory = TemporaryDirectory()
        let db = try openTodos(at: directory.path("todos.sqlite"))
        guard case .manual = db.conflictResolution else {
            Issue.record("not manual: \(db.conflictResolution)")
            return
        }
    }

    @Test("Documents and conflicts: a stale save fails, and lastWriteWins saves on top")
    func staleSave() throws {
        let db = try TestDatabase().db
        #expect(try finishTodo(in: db) == Todo(title: "Water the ferns", done: false))
    }

    @Test("Documents and conflicts: the conflict handler keeps the current title and marks the todo done")
    func conflictHandler() throws {
        let db = try TestDatabase().db
        let first = try db.save(Todo(title: "Call", done: false), id: "todo:1")
        let second = try db.save(Todo(title: "Call Sam", done: false), id: "todo:1", replacing: first)
        let done = try markDone(Todo(title: "Call", done: false), id: "todo:1", basedOn: first, in: db)
        #expect(try db.document(id: "todo:1")?.revision == done)
        #expect(try db.document(id: "todo:1", as: Todo.self) == Todo(title: "Call Sam", done: true))
        try db.delete(id: "todo:1", revision: done)
        #expect(throws: DatabaseError.self) { try markDone(Todo(title: "Call", done: false), id: "todo:1", basedOn: second, in: db) }
    }

    @Test("Documents and conflicts: a todo is deleted, and a missing one is left alone")
    func deleteDocument() throws {
        let db = try TestDatabase().db
        let first = try db.save(Todo(title: "Gone", done: false), id: "todo:1")
        try db.save(Todo(title: "Gone soon", done: false), id: "todo:1", replacing: first)
        try deleteTodo("todo:1", from: db)
        #expect(try db.document(id: "todo:1") == nil)
        try deleteTodo("todo:missing", from: db)
    }

    @Test("Documents and conflicts: kept conflicts are settled, the done leaf winning")
    func settleConflicts() throws {
        let db = try TestDatabase(.init(conflictResolution: .manual)).db
        try Self.conflict(db, "todo:1", base: ["title": .string("Call"), "done": .bool(false)],
            local: ["title": .string("Call Sam")], remote: ["done": .bool(true)])
        #expect(try settleKeptConflicts(in: db) == ["todo:1"])
        #expect(try db.conflictedDocumentIDs().isEmpty)
        #expect(try db.document(id: "todo:1", as: Todo.self) == Todo(title: "Call", done: true))
    }

    @Test("Documents and conflicts: the changes feed gives each document once, at its latest change")
    func changesFeed() async throws {
        let db = try TestDatabase().db
        let kept = try await db.save(Todo(title: "Kept", done: false), id: "todo:kept")
        let gone = try await db.save(Todo(title: "Gone", done: false), id: "todo:gone")
        try await db.delete(id: "todo:gone", revision: gone)
        #expect(try await firstChanges(of: db, count: 2) == ["todo:kept \(kept)", "deleted todo:gone"])
    }

    // MARK: Replication

    @Test("Replication: every status has its line")
    func statusLines() {
        #expect(statusLine(.stopped) == "stopped")
        #expect(statusLine(.offline) == "offline, retrying")
        #expect(statusLine(.connecting) == "connecting")
        #expect(statusLine(.idle) == "up to date")
        #expect(statusLine(.busy(ReplicationProgress(completed: 2, total: 5))) == "2 of 5 changes")
        #expect(statusLine(.completed) == "done")
        #expect(statusLine(.failed(ReplicatorError(code: "protocol", message: "bad"))) == "failed: protocol")
    }

    @Test("Replication: the document events report A's todo as pulled, at the revision A saved", .timeLimit(.minutes(5)))
    func documentEventsPulled() async throws {
        try await NodeReplicationTests().withTwoNodes { a, b in
            let replicator = NodeReplicationTests.replicator(of: b, from: a)
            let events = replicator.documentEvents
            replicator.start()
            let saved = try await a.database.save(Todo(title: "Watched", done: false), id: "todo:watched")
            #expect(await waitForPull(of: "todo:watched", in: events) == saved)
            replicator.stop()
        }
    }

    @Test("Replication: A publishes its public notes to B, and keeps the others", .timeLimit(.minutes(5)))
    func publishedNotes() async throws {
        try await NodeReplicationTests().withTwoNodes { a, b in
            let replicator = NodeReplicationTests.replicator(of: b, from: a)
            replicator.start()
            let (published, received) = try await publishNotes(from: a, to: b)
            try await published.save(Todo(title: "Private", done: false), id: "private/1")
            try await published.save(Todo(title: "Public", done: false), id: "public/1")
            for try await change in received.changes(since: 0) where change.documentID == "public/1" { break }
            _ = try await replicator.sync()
            #expect(try await received.document(id: "public/1", as: Todo.self)?.title == "Public")
            #expect(try await received.document(id: "private/1") == nil)
            replicator.stop()
        }
    }

    @Test("Replication: a node refused as pending is accepted, and then replicates", .timeLimit(.minutes(5)))
    func pendingPeerAccepted() async throws {
        try await NodeReplicationTests().withTwoNodes { a, b in
            try await a.database.save(Todo(title: "Behind the door", done: false), id: "todo:door")
            let replicator = b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: a.listenAddress))
            var states = replicator.status.makeAsyncIterator()
            replicator.start()
            // B dials again after a refusal: by its second dial, A has listed the first as pending.
            var dials = 0
            while dials < 2, let state = await states.next() {
                if state == .connecting { dials += 1 }
            }
            #expect(try await acceptPendingPeers(of: a) == [b.nodeID])
            _ = try await replicator.sync()
            #expect(try await b.database.document(id: "todo:door", as: Todo.self)?.title == "Behind the door")
            replicator.stop()
        }
    }

    // MARK: Resolvers and rules

    @Test("Resolvers and rules: notes merge, settings keep the newest, drafts keep their conflict")
    func rules() throws {
        let directory = TemporaryDirectory()
        let db = try openNotes(at: directory.path("notes.sqlite"))
        try Self.conflict(db, "note:1", base: ["type": .string("note"), "title": .string("a"), "text": .string("a")],
            local: ["title": .string("b")], remote: ["text": .string("c")])
        try Self.conflict(db, "settings/theme", base: ["theme": .string("light"), "updatedAt": .string("2026-01-01T00:00:00Z")],
            local: ["theme": .string("dark"), "updatedAt": .string("2026-03-01T00:00:00Z")],
            remote: ["theme": .string("blue"), "updatedAt": .string("2026-02-01T00:00:00Z")])
        try Self.conflict(db, "drafts/1", base: ["text": .string("a")], local: ["text": .string("b")], remote: ["text": .string("c")])
        #expect(try db.conflictedDocumentIDs() == ["drafts/1"])
        #expect(try db.document(id: "note:1")?.body == .object(["type": .string("note"), "title": .string("b"), "text": .string("c")]))
        #expect(try db.document(id: "settings/theme")?.body.objectValue?["theme"] == .string("dark"))
    }

    @Test("Resolvers and rules: a custom resolver writes the union of the leaves' tags")
    func tagUnion() throws {
        let db = try TestDatabase().db
        mergeTags(in: db)
        try Self.conflict(db, "photo:1", base: ["tags": .array([.string("cat")])],
            local: ["tags": .array([.string("cat"), .string("sofa")])], remote: ["tags": .array([.string("cat"), .string("garden")])])
        #expect(try db.conflictedDocumentIDs().isEmpty)
        #expect(try db.document(id: "photo:1")?.body.objectValue?["tags"] == .array([.string("cat"), .string("garden"), .string("sofa")]))
    }

    @Test("Resolvers and rules: the replicator's resolver keeps this node's settings and pulls nothing else", .timeLimit(.minutes(5)))
    func replicatorResolver() async throws {
        let directory = TemporaryDirectory()
        let node = try Node(directory: directory.path("node"))
        let peer = try Node(directory: directory.path("peer"))
        peer.replicator(ReplicatorConfiguration(peer: node.nodeID, direction: .push)).start()
        let base = try await peer.database.save(json: .object(["theme": .string("light")]), id: "settings")
        try await peer.database.save(json: .object(["n": .int(1)]), id: "other")
        try await pullPreferringMine(into: node, from: peer)
        #expect(try await node.database.document(id: "settings")?.revision == base)
        #expect(try await node.database.document(id: "other") == nil)
        try await node.database.save(json: .object(["theme": .string("dark")]), id: "settings", replacing: base)
        try await peer.database.save(json: .object(["theme": .string("sepia")]), id: "settings", replacing: base)
        try await pullPreferringMine(into: node, from: peer)
        #expect(try await node.database.document(id: "settings")?.body == .object(["theme": .string("dark")]))
        #expect(try await node.database.conflictedDocumentIDs().isEmpty)
        await peer.stop()
        await node.stop()
    }
}
