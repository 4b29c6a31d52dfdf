import Canopy
import Foundation
import Testing

// The Swift block of the DocC article Embedding.md that shows `Node`, verbatim (checked below):
// it compiles here, and the tests run it.

func replicateNotes(in directory: String) async throws -> Note? {
    let a = try Node(directory: directory + "/a")           // created if missing; a free port
    let b = try Node(directory: directory + "/b")
    try await a.database.save(Note(title: "Groceries", text: "milk"), id: "note:1")
    // Each node allows the other; B dials A over encrypted TCP.
    a.replicator(ReplicatorConfiguration(peer: b.nodeID)).start()
    let replicator = b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: a.listenAddress))
    let status = replicator.status                          // taken before start: every state
    replicator.start()
    for await state in status {                             // stopped, connecting, busy(…), idle
        if state == .idle { break }
    }
    let note = try await b.database.document(id: "note:1", as: Note.self)   // Groceries: milk
    replicator.stop()
    await b.stop()
    await a.stop()
    return note
}

@Suite("Nodes in one process replicating over encrypted loopback TCP", .serialized)
struct NodeReplicationTests {
    /// The ```swift block of the Embedding article that opens a `Node`.
    static func nodeBlock() throws -> String {
        guard let block = try EmbeddingExampleTests.articleBlocks().first(where: { $0.contains("Node(directory:") }) else {
            throw ArticleBlockMissing()
        }
        return block
    }

    struct ArticleBlockMissing: Error {}

    /// Two nodes in a fresh temporary directory, stopped after `body`.
    func withTwoNodes(_ body: (Node, Node) async throws -> Void) async throws {
        let directory = TemporaryDirectory()
        let a = try Node(directory: directory.path("a"))
        let b = try Node(directory: directory.path("b"))
        do { try await body(a, b) } catch {
            Issue.record(error)
        }
        await b.stop()
        await a.stop()
    }

    /// The statuses `iterator` gives up to and including `last` (all of them if the stream ends).
    static func states(_ iterator: inout AsyncStream<Replicator.Status>.Iterator, until last: Replicator.Status) async -> [Replicator.Status] {
        var seen: [Replicator.Status] = []
        while let state = await iterator.next() {
            seen.append(state)
            if state == last { break }
        }
        return seen
    }

    @Test("the Embedding article's node example is this file's code, byte for byte, and has at most 25 lines")
    func readmeBlockIsCompiledHere() throws {
        let block = try Self.nodeBlock()
        let source = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        #expect(source.contains(block), "Embedding.md's node example differs from \(#filePath); copy one to the other")
        #expect(block.split(separator: "\n").count <= 25)
    }

    @Test("the Embedding article's node example runs: B replicates from A, goes idle and reads A's note as a Note")
    func readmeExampleRuns() async throws {
        let directory = TemporaryDirectory()
        let note = try await replicateNotes(in: directory.url.path)
        #expect(note == Note(title: "Groceries", text: "milk"))
    }

    @Test("two nodes that replicated everything have the same database digest; a write changes it until the peer has it")
    func digestsAgree() async throws {
        try await withTwoNodes { a, b in
            let empty = String(repeating: "0", count: 64)
            #expect(a.database.digest == empty && b.database.digest == empty)
            try await a.database.save(Note(title: "Digest", text: "one"), id: "note:digest")
            #expect(a.database.digest != empty && a.database.digest != b.database.digest)
            a.replicator(ReplicatorConfiguration(peer: b.nodeID)).start()
            let replicator = b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: a.listenAddress))
            var states = replicator.status.makeAsyncIterator()
            replicator.start()
            _ = await Self.states(&states, until: .idle)
            #expect(b.database.digest == a.database.digest)
            replicator.stop()
        }
    }

    @Test("a continuous replicator's status goes from connecting to idle, and stop sends stopped and ends the stream")
    func statusStream() async throws {
        try await withTwoNodes { a, b in
            try await a.database.save(Note(title: "Status", text: "watched"), id: "note:status")
            a.replicator(ReplicatorConfiguration(peer: b.nodeID)).start()
            let replicator = b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: a.listenAddress))
            var states = replicator.status.makeAsyncIterator()
            replicator.start()
            let seen = await Self.states(&states, until: .idle)
            #expect(seen.first == .stopped)
            let connecting = try #require(seen.firstIndex(of: .connecting), "never connecting: \(seen)")
            #expect(connecting < seen.count - 1 && seen.last == .idle, "\(seen)")
            #expect(try await b.database.document(id: "note:status", as: Note.self) == Note(title: "Status", text: "watched"))

            replicator.stop()
            var after: [Replicator.Status] = []
            while let state = await states.next() { after.append(state) }
            #expect(after.last == .stopped, "\(after)")
        }
    }

    @Test("a one-shot replicator's sync pushes and pulls: a document written on each node arrives on the other")
    func oneShotSync() async throws {
        try await withTwoNodes { a, b in
            try await a.database.save(Note(title: "From A", text: "pulled by B"), id: "note:a")
            try await b.database.save(Note(title: "From B", text: "pushed by B"), id: "note:b")
            a.replicator(ReplicatorConfiguration(peer: b.nodeID, continuous: false)).start()
            let replicator = b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: a.listenAddress, continuous: false))
            var states = replicator.status.makeAsyncIterator()

            // `completed` counts the changes checked during this sync: the pass that adding the
            // peer starts may already have carried both documents, so it can be 0.
            let outcome = try await replicator.sync()
            #expect(outcome.rejected == 0 && outcome.refusedByPeer == 0)
            #expect(try await b.database.document(id: "note:a", as: Note.self) == Note(title: "From A", text: "pulled by B"))
            #expect(try await a.database.document(id: "note:b", as: Note.self) == Note(title: "From B", text: "pushed by B"))
            // The pass's end is in the stream before `sync` returns.
            let seen = await Self.states(&states, until: .completed)
            #expect(seen.contains(.connecting) && seen.last == .completed, "\(seen)")
            replicator.stop()
        }
    }

    @Test("a one-shot sync against a peer that replicates continuously pushes, pulls and completes", arguments: 0..<3)
    func oneShotAgainstContinuous(round: Int) async throws {
        try await withTwoNodes { a, b in
            try await a.database.save(Note(title: "From A", text: "round \(round)"), id: "note:a")
            try await b.database.save(Note(title: "From B", text: "round \(round)"), id: "note:b")
            a.replicator(ReplicatorConfiguration(peer: b.nodeID)).start()
            let replicator = b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: a.listenAddress, continuous: false))
            let outcome = try await replicator.sync()
            #expect(outcome.rejected == 0 && outcome.refusedByPeer == 0)
            #expect(try await b.database.document(id: "note:a", as: Note.self) == Note(title: "From A", text: "round \(round)"))
            #expect(try await a.database.document(id: "note:b", as: Note.self) == Note(title: "From B", text: "round \(round)"))
            replicator.stop()
        }
    }

    @Test("an application opens several databases on its node and shares one read-only: it replicates over the same connection, and the peer's writes to it stay out")
    func severalDatabasesShared() async throws {
        try await withTwoNodes { a, b in
            let notesA = try await a.createDatabase("notes")
            let notesB = try await b.createDatabase("notes", conflicts: "local-wins")
            #expect(throws: NodeError.self) { try a.database(named: "photos") }
            await #expect(throws: NodeError.self) { try await a.createDatabase("Bad Name") }
            a.replicator(ReplicatorConfiguration(peer: b.nodeID)).start()
            let replicator = b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: a.listenAddress))
            replicator.start()
            try await a.share("notes", with: b.nodeID, access: .read)          // b may read a's notes
            try await b.share("notes", with: a.nodeID, access: .readWrite)
            try await notesA.save(Note(title: "Shared", text: "from a"), id: "note:a")
            try await notesB.save(Note(title: "Kept", text: "from b"), id: "note:b")
            try await a.database.save(Note(title: "Default", text: "too"), id: "note:default")
            var arrived = false
            for try await change in notesB.changes(since: 0) where change.documentID == "note:a" {
                arrived = true
                break
            }
            #expect(arrived)
            #expect(try await notesB.document(id: "note:a", as: Note.self) == Note(title: "Shared", text: "from a"))
            let outcome = try await replicator.sync()
            #expect(outcome.rejected == 0)
            #expect(try await notesA.document(id: "note:b", as: Note.self) == nil, "a lets b only read its notes")
            #expect(try await b.database.document(id: "note:a", as: Note.self) == nil, "notes stay in notes")
            try await a.unshare("notes", with: b.nodeID)
            try await a.deleteDatabase("notes")
            #expect(throws: NodeError.self) { try a.database(named: "notes") }
            replicator.stop()
        }
    }

    @Test("a stopped node frees its directory at once: another node opens it, with the same id and documents, while the first is still referenced")
    func stopFreesTheDirectory() async throws {
        let directory = TemporaryDirectory()
        let first = try Node(directory: directory.path("n"))
        try await first.database.save(Note(title: "Kept", text: "across"), id: "note:kept")
        #expect(throws: NodeError.self) { try Node(directory: directory.path("n")) }
        await first.stop()
        let second = try Node(directory: directory.path("n"))
        #expect(second.nodeID == first.nodeID)
        #expect(try await second.database.document(id: "note:kept", as: Note.self) == Note(title: "Kept", text: "across"))
        await second.stop()
    }

    @Test("a node that dials without being allowed is listed as pending until the application allows it; then it replicates, and disallowing it takes it off the allow-list")
    func pendingPeerAllowed() async throws {
        try await withTwoNodes { a, b in
            try await a.database.save(Note(title: "Behind the door", text: "a"), id: "note:a")
            let replicator = b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: a.listenAddress))
            replicator.start()
            // No event tells the library of a refused node: its list is polled, bounded.
            var pending: [PendingPeer] = []
            for _ in 0..<1500 where pending.isEmpty {
                pending = try await a.pendingPeers()
                if pending.isEmpty { try await Task.sleep(for: .milliseconds(20)) }
            }
            #expect(pending.first?.nodeID == b.nodeID && (pending.first?.attempts ?? 0) >= 1, "\(pending)")
            #expect(try await a.allowedPeers().isEmpty)
            try await a.allow(b.nodeID)
            #expect(try await a.allowedPeers() == [b.nodeID])
            #expect(try await a.pendingPeers().isEmpty, "allowing a pending peer accepts it")
            _ = try await replicator.sync()
            #expect(try await b.database.document(id: "note:a", as: Note.self) == Note(title: "Behind the door", text: "a"))
            try await a.disallow(b.nodeID)
            #expect(try await a.allowedPeers().isEmpty)
            replicator.stop()
        }
    }

    @Test("a malformed address fails the replicator without touching the network, in status and in sync")
    func malformedAddress() async throws {
        try await withTwoNodes { a, b in
            let replicator = b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: "no port"))
            var states = replicator.status.makeAsyncIterator()
            replicator.start()
            #expect(await states.next() == .stopped)
            guard case .failed(let error)? = await states.next() else {
                Issue.record("the replicator did not fail")
                return
            }
            #expect(error.code == "invalid_configuration")
            await #expect(throws: ReplicatorError.self) { try await replicator.sync() }
        }
    }
}
