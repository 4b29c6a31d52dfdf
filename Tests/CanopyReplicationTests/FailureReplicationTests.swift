import CanopyCore
import CanopyReplication
import CanopySimulation
import CanopyStore
import CanopyWire
import Testing

@Suite("Replication across failures")
struct FailureReplicationTests {
    @Test("a connection cut in the middle of a batch resumes from the checkpoint: nothing lost, little sent twice")
    func cutMidBatch() throws {
        let harness = try ReplicationHarness(seed: 41)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        try writeDocuments(a.store, prefix: "a", count: 4000)
        let config = ReplicationConfiguration(direction: .both, batchSize: 100, window: 4)
        let first = harness.connect(a, b, configuration: config)
        // Run until b holds part of the data, then reset the connection mid-stream.
        harness.scheduler.run(until: { (try? b.store.documentCount) ?? 0 >= 1500 })
        first.link.cut()
        harness.scheduler.run(until: { first.sessions.0.isClosed && first.sessions.1.isClosed })
        let received = try b.store.documentCount
        #expect(received >= 1500 && received < 4000)
        harness.dropSessions(of: a)
        harness.dropSessions(of: b)

        let second = harness.connect(a, b, configuration: config)
        #expect(harness.runUntilQuiescent())
        #expect(try harness.divergences() == [])
        #expect(try b.store.documentCount == 4000)
        // The second connection offered only what b had not checkpointed: at most the batches in
        // flight (window × batch size) beyond what b still needed.
        let offered = second.sessions.0.pushProgress.total
        #expect(offered <= UInt64(4000 - received) + UInt64(config.window * config.batchSize))
        #expect(offered >= UInt64(4000 - received))
    }

    @Test("a node restarted from its database file resumes replication from its checkpoint")
    func restartFromFile() throws {
        let harness = try ReplicationHarness(seed: 42)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        try writeDocuments(a.store, prefix: "a", count: 2000)
        let first = harness.connect(a, b)
        #expect(harness.runUntilQuiescent())
        first.sessions.1.close()
        harness.runUntilQuiescent()
        harness.dropSessions(of: a)
        harness.dropSessions(of: b)

        // b restarts from its file; a writes a few more documents meanwhile.
        try b.reopen()
        try writeDocuments(a.store, prefix: "more", count: 25)
        let second = harness.connect(a, b)
        #expect(harness.runUntilQuiescent())
        #expect(try harness.divergences() == [])
        #expect(try b.store.documentCount == 2025)
        #expect(second.sessions.0.pushProgress.total == 25)
    }

    @Test("a revision whose id is not the hash of its content is rejected and reported; the rest of the batch is written")
    func lyingPeer() throws {
        let harness = try ReplicationHarness(seed: 43)
        let b = try harness.addNode("b")
        let link = InMemoryLink(scheduler: harness.scheduler)
        let box = SessionOutcome()
        let session = startPullSession(b, over: link.ends.1, harness, recording: box)
        defer { withExtendedLifetime(session) {} }
        let liar = ScriptedPeer(endpoint: link.ends.0)
        harness.scheduler.run(until: { liar.received.count >= 2 })
        // hello, then answer b's checkpointGet, then one batch with a revision whose id is not its hash.
        liar.send(.hello(Hello(databaseID: Array(repeating: 7, count: 16), revsLimit: 1000, window: 4)))
        harness.scheduler.run(until: { liar.received.contains { if case .checkpointGet = $0 { return true }; return false } })
        guard case .checkpointGet(let get) = liar.received.last(where: { if case .checkpointGet = $0 { return true }; return false })! else { return }
        liar.send(.checkpoint(Checkpoint(requestID: get.requestID, value: nil)))
        harness.scheduler.run(until: { liar.subscription != nil })
        let fake = RevisionID(generation: 1, digestHigh: 1, digestLow: 2)
        let honestBody = Array(#"{"fine":true}"#.utf8)
        let honest = RevisionHasher.revisionID(parent: nil, kind: .live, canonicalBody: honestBody)
        liar.send(.changes(Changes(requestID: 1, subscriptionID: liar.subscription!, caughtUp: true, entries: [
            ChangesEntry(sequence: 1, docID: "victim", revisions: [LeafRevision(id: fake, kind: .live)]),
            ChangesEntry(sequence: 2, docID: "honest", revisions: [LeafRevision(id: honest, kind: .live)]),
        ])))
        harness.scheduler.run(until: { liar.received.contains { if case .changesReply = $0 { return true }; return false } })
        liar.send(.revisions(Revisions(requestID: 1, final: true, revisions: [
            RevisionTransfer(ancestry: [], knownAncestorTail: 0, body: Array(#"{"evil":true}"#.utf8)),
            RevisionTransfer(ancestry: [], knownAncestorTail: 0, body: honestBody),
        ])))
        harness.scheduler.run(until: { liar.received.contains { if case .revisionsAck = $0 { return true }; return false } })
        #expect(box.reason == nil)
        #expect(box.rejected.map(\.documentID) == ["victim"])
        #expect(throws: StoreError.self) { try b.store.get(id: "victim") }
        #expect(try b.store.get(id: "honest").revision == honest)
        #expect(try b.store.documentCount == 1)
    }
}

/// What a session under test reported: how it closed, and the documents it rejected.
final class SessionOutcome: @unchecked Sendable {
    var reason: TransportCloseReason?
    var rejected: [DocumentEvent] = []
    /// Every document event reported, in order.
    var documents: [DocumentEvent] = []
    /// Whether the pull reported `pullCaughtUp`.
    var caughtUp = false
}

/// Starts a pull session of `node` over `transport`, recording into `outcome`. The caller keeps
/// the session alive for as long as the test drives it.
func startPullSession(
    _ node: ReplicationHarness.Node, over transport: any MessageTransport, _ harness: ReplicationHarness,
    recording outcome: SessionOutcome, worker: any ReplicationWorker = InlineReplicationWorker(),
    writer: any ReplicationWorker = InlineReplicationWorker()
) -> ReplicationSession {
    let session = ReplicationSession(
        store: node.store, transport: transport, scheduler: harness.scheduler, random: harness.random,
        configuration: ReplicationConfiguration(direction: .pull), logger: .init(label: "test"), worker: worker,
        writer: writer
    ) { event in
        if case .closed(let reason) = event { outcome.reason = reason }
        if case .pullCaughtUp = event { outcome.caughtUp = true }
        if case .documents(let documents) = event {
            outcome.rejected += documents.filter { $0.kind == .rejected }
            outcome.documents += documents
        }
    }
    session.start()
    return session
}

/// A hand-driven peer for adversarial tests: records what it receives, sends what it is told.
final class ScriptedPeer: @unchecked Sendable {
    let endpoint: InMemoryLink.Endpoint
    var received: [Message] = []
    var subscription: RequestID?

    init(endpoint: InMemoryLink.Endpoint) {
        self.endpoint = endpoint
        endpoint.start { [weak self] event in
            guard let self, case .message(let message) = event else { return }
            self.received.append(message)
            if case .subscribe(let subscribe) = message { self.subscription = subscribe.requestID }
        }
    }

    func send(_ message: Message) { endpoint.send(message) }
}

@Suite("Graceful shutdown")
struct GracefulShutdownTests {
    @Test("draining finishes the batches in flight and checkpoints them before closing")
    func drain() throws {
        let harness = try ReplicationHarness(seed: 44)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        try writeDocuments(a.store, prefix: "a", count: 3000)
        let config = ReplicationConfiguration(direction: .both, batchSize: 100, window: 4)
        let connection = harness.connect(a, b, configuration: config)
        harness.scheduler.run(until: { (try? b.store.documentCount) ?? 0 >= 500 })
        final class Flag: @unchecked Sendable { var done = false }
        let flag = Flag()
        connection.sessions.1.drainAndClose(timeoutSeconds: 30) { flag.done = true }
        harness.scheduler.run(until: { flag.done })
        #expect(flag.done)
        #expect(connection.sessions.1.isClosed)
        // Everything b holds is covered by its checkpoint: nothing was half-received.
        let received = try b.store.documentCount
        #expect(received < 3000)
        let checkpointDoc = try b.store.changes(since: 0, limit: 5000).count
        #expect(checkpointDoc == received)
        harness.scheduler.advance(by: 1)
        harness.dropSessions(of: a)
        harness.dropSessions(of: b)
        let second = harness.connect(a, b, configuration: config)
        #expect(harness.runUntilQuiescent())
        #expect(try b.store.documentCount == 3000)
        // Resumed from the checkpoint written by the drain.
        #expect(second.sessions.0.pushProgress.total == UInt64(3000 - received))
    }
}

@Suite("Documents imported from CouchDB")
struct CouchImportReplicationTests {
    /// A CouchDB `_bulk_docs` export: a document with two generations of history, a deleted one,
    /// and one with a conflict whose losing branch CouchDB had deleted (settled).
    static let couchExport = #"""
        {"new_edits":false,"docs":[
        {"_id":"from-couch","_rev":"2-b1946ac92492d2347c6235b4d2611184","_revisions":{"start":2,"ids":["b1946ac92492d2347c6235b4d2611184","9a0364b9e99bb480dd25e1f0284c8555"]},"title":"imported"},
        {"_id":"gone","_rev":"2-1f0e3dad99908345f7439f8ffabdffc4","_deleted":true,"_revisions":{"start":2,"ids":["1f0e3dad99908345f7439f8ffabdffc4","967a00dff5e02add41819138abb3284d"]}},
        {"_id":"settled","_rev":"2-aab3238922bcc25a6f606eb525ffdc56","_revisions":{"start":2,"ids":["aab3238922bcc25a6f606eb525ffdc56","c4ca4238a0b923820dcc509a6f75849b"]},"side":"winner"},
        {"_id":"settled","_rev":"3-9bf31c7ff062936a96d3c8bd1f8f2ff3","_deleted":true,"_revisions":{"start":3,"ids":["9bf31c7ff062936a96d3c8bd1f8f2ff3","c74d97b01eae257e44aa9d5bade97baf","c4ca4238a0b923820dcc509a6f75849b"]}}
        ]}
        """#

    /// Every leaf of every document of `store`: id, revision, kind, ancestry and body.
    static func leaves(_ store: DocumentStore) throws -> [String] {
        try store.changes(since: 0).flatMap { change -> [String] in
            let tree = try #require(try store.revisionTree(id: change.documentID))
            return try tree.leaves.map { leaf in
                let body = try store.get(id: change.documentID, rev: leaf.id).body
                return "\(change.documentID) \(leaf.id) \(leaf.kind) \(tree.ancestry(of: leaf.id, limit: 10)) " + String(decoding: CanonicalJSON.encode(body), as: UTF8.self)
            }
        }.sorted()
    }

    @Test(
        "documents with CouchDB's revision ids replicate through a line of three nodes with their ids and histories",
        arguments: [false, true])
    func importedDocumentsReplicate(couchDB: Bool) throws {
        let harness = try ReplicationHarness(seed: 45)
        let a = try harness.addNode("a")
        let b = try harness.addNode("b")
        let c = try harness.addNode("c")
        _ = try a.store.importBulkDocs(Array(Self.couchExport.utf8), couchDB: couchDB)
        try writeDocuments(a.store, prefix: "native", count: 5)
        harness.connect(a, b)
        harness.connect(b, c)
        #expect(harness.runUntilQuiescent())
        #expect(!b.events.contains { $0.kind == .rejected } && !c.events.contains { $0.kind == .rejected })
        #expect(try c.store.documentCount == 8)
        let (onA, onC) = (try Self.leaves(a.store), try Self.leaves(c.store))
        #expect(onC == onA, "only on A: \(Set(onA).subtracting(onC)); only on C: \(Set(onC).subtracting(onA))")
        let history = try c.store.get(id: "from-couch", options: [.revisions]).history
        #expect(history?.map(\.description) == ["2-b1946ac92492d2347c6235b4d2611184", "1-9a0364b9e99bb480dd25e1f0284c8555"])
        // An export on C is the export on A: the same documents, revision ids and histories.
        #expect(try Self.sameExport(a.store, c.store))

        // A Canopy edit on top of an imported revision is content-addressed and verified again;
        // the imported leaves it sits beside (the closed CouchDB loser) still travel.
        let imported = try a.store.get(id: "settled").revision
        let edited = try a.store.put(id: "settled", body: .object(["side": .string("edited in canopy")]), replacing: imported)
        #expect(harness.runUntilQuiescent())
        #expect(try c.store.get(id: "settled").revision == edited)
        #expect(try Self.leaves(c.store) == Self.leaves(a.store))
        #expect(try harness.divergences() == [])
    }

    /// The exports hold the same entries (changes order may differ between the nodes).
    static func sameExport(_ x: DocumentStore, _ y: DocumentStore) throws -> Bool {
        func entries(_ store: DocumentStore) throws -> [JSONValue] {
            guard case .object(let members) = try JSONValue.parse(store.exportBulkDocs()), case .array(let docs)? = members["docs"] else {
                return []
            }
            return docs.sorted { CanonicalJSON.encode($0).lexicographicallyPrecedes(CanonicalJSON.encode($1)) }
        }
        return try entries(x) == entries(y)
    }

    @Test("a revision whose id does not match its content and is not marked imported is still refused")
    func unmarkedMismatchRefused() throws {
        let store = try ReplicationHarness(seed: 46).addNode("x").store
        let path = try RevisionPath(leaf: #require(RevisionID("1-967a00dff5e02add41819138abb3284d")), kind: .live)
        let lying = ForeignRevision(documentID: "lie", path: path, body: .value(.object(["a": .int(1)])))
        #expect(throws: StoreError.self) { try store.bulkInsertForeign([lying]) }
        let marked = ForeignRevision(documentID: "lie", path: path, body: .value(.object(["a": .int(1)])), importedID: true)
        try store.bulkInsertForeign([marked])
        let sent = try store.revisionsToSend([RevisionRequest(documentID: "lie", revisions: [path.leaf], knownAncestors: [])])
        #expect(sent.map(\.importedID) == [true])
        // An id marked imported that is its content's hash is stored as an ordinary one.
        let honest = RevisionHasher.revisionID(parent: nil, kind: .live, body: .object(["b": .int(2)]))
        try store.bulkInsertForeign([ForeignRevision(
            documentID: "honest", path: try RevisionPath(leaf: honest, kind: .live), body: .value(.object(["b": .int(2)])),
            importedID: true)])
        let plain = try store.revisionsToSend([RevisionRequest(documentID: "honest", revisions: [honest], knownAncestors: [])])
        #expect(plain.map(\.importedID) == [false])
    }
}
