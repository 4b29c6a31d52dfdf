import Canopy
import Foundation
import Testing

// An application attached to a real `canopyd` through `NodeClient`, with `import Canopy` only
// (the agents are started by AgentHarness). The function below is the NodeClient block of the DocC article Embedding.md,
// verbatim (checked below): it compiles here and the tests run it against a real agent.

func saveThroughAgent(dataDirectory: String) async throws -> Note? {
    let client = try NodeClient(directory: dataDirectory)  // the agent's admin.sock
    let first = try await client.save(Note(title: "Groceries", text: "milk"), id: "note:2")
    try await client.save(Note(title: "Groceries", text: "milk, eggs"), id: "note:2", replacing: first)
    return try await client.document(id: "note:2", as: Note.self)   // Groceries: milk, eggs
}

/// The value the Embedding article's examples save.
struct Note: Codable, Equatable, Sendable {
    var title: String
    var text: String
}

@Suite("an application attached to a running canopyd through NodeClient", .serialized)
struct NodeClientEndToEndTests {
    static let article = ModuleSurfaceTests.sources.appendingPathComponent("Canopy/Canopy.docc/Embedding.md")

    /// The ```swift block of the Embedding article that makes a `NodeClient(`.
    static func clientBlock() throws -> String {
        let text = try String(contentsOf: article, encoding: .utf8)
        let blocks = text.components(separatedBy: "```swift\n").dropFirst().map { $0.components(separatedBy: "\n```\n")[0] }
        return try #require(blocks.first { $0.contains("NodeClient(") }, "\(article.path) has no Swift block making a NodeClient")
    }

    /// Runs `body` with a client attached to a started agent, which runs until `body` returns.
    static func withClient(_ body: (NodeClient, AgentProcess) async throws -> Void) async throws {
        let agent = try AgentProcess()
        try agent.start()
        try await body(try NodeClient(socket: agent.socketPath), agent)
        withExtendedLifetime(agent) {}
    }

    @Test("the Embedding article's NodeClient example is this file's code, byte for byte")
    func readmeBlockIsCompiledHere() throws {
        let block = try Self.clientBlock()
        let source = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        #expect(source.contains(block), "Embedding.md's NodeClient example differs from \(#filePath); copy one to the other")
    }

    @Test("the Embedding article's NodeClient example runs against a real canopyd and reads the second save back", .timeLimit(.minutes(5)))
    func readmeExampleRuns() async throws {
        let agent = try AgentProcess()
        try agent.start()
        let note = try await saveThroughAgent(dataDirectory: agent.dataDir)
        #expect(note == Note(title: "Groceries", text: "milk, eggs"))
        #expect(try agent.value(of: "note:2", "text") == .string("milk, eggs"), "the agent holds what the client saved")
    }

    @Test("a Codable value saved through the client reads back as the value and as raw JSON at the returned revision", .timeLimit(.minutes(5)))
    func codableRoundTrip() async throws {
        try await Self.withClient { client, _ in
            let revision = try await client.save(Note(title: "Round", text: "trip"), id: "note:round")
            #expect(try await client.document(id: "note:round", as: Note.self) == Note(title: "Round", text: "trip"))
            let document = try #require(try await client.document(id: "note:round"))
            #expect(document.revision == revision && document.conflicts.isEmpty)
            #expect(document.body == .object(["text": .string("trip"), "title": .string("Round")]))
            #expect(try await client.document(id: "note:absent") == nil)
            let raw = try await client.save(json: .object(["n": .int(1)]), id: "raw", db: "default")
            #expect(try await client.document(id: "raw", db: "default")?.revision == raw)
        }
    }

    @Test("a save replacing a revision that is no longer current fails with the protocol's conflict code", .timeLimit(.minutes(5)))
    func staleSaveConflicts() async throws {
        try await Self.withClient { client, _ in
            let first = try await client.save(Note(title: "One", text: "a"), id: "note:stale")
            let second = try await client.save(Note(title: "Two", text: "b"), id: "note:stale", replacing: first)
            let error = await #expect(throws: NodeClientError.self) {
                try await client.save(Note(title: "Three", text: "c"), id: "note:stale", replacing: first)
            }
            #expect(error?.code == "conflict", "\(String(describing: error))")
            #expect(try await client.document(id: "note:stale")?.revision == second, "nothing of the stale save was written")
            let missing = await #expect(throws: NodeClientError.self) {
                try await client.delete(id: "note:never", revision: first)
            }
            #expect(missing?.code == "not_found", "\(String(describing: missing))")
        }
    }

    @Test("a delete hides the document, shows as deleted in changes, and a stale delete is a conflict", .timeLimit(.minutes(5)))
    func deleteThroughClient() async throws {
        try await Self.withClient { client, _ in
            let first = try await client.save(Note(title: "Gone", text: "soon"), id: "note:gone")
            let second = try await client.save(Note(title: "Gone", text: "now"), id: "note:gone", replacing: first)
            let stale = await #expect(throws: NodeClientError.self) { try await client.delete(id: "note:gone", revision: first) }
            #expect(stale?.code == "conflict")
            let deletion = try await client.delete(id: "note:gone", revision: second)
            #expect(deletion.generation == 3)
            #expect(try await client.document(id: "note:gone") == nil)
            #expect(try await client.document(id: "note:gone", as: Note.self) == nil)
            let page = try await client.changes(since: 0)
            let change = try #require(page.changes.first { $0.documentID == "note:gone" })
            #expect(change.deleted && change.revisions.first == deletion)
            #expect(page.lastSequence >= change.sequence)
            #expect(try await client.changes(since: page.lastSequence).changes.isEmpty)
            #expect(try await client.conflictedDocumentIDs().isEmpty)
        }
    }

    @Test("a conflict the agent keeps is in conflictedDocumentIDs, and document(id:) names the other open leaf", .timeLimit(.minutes(5)))
    func keptConflictIsListed() async throws {
        let agent = try AgentProcess(initArguments: ["--listen", "127.0.0.1:0", "--conflicts", "manual"])
        try agent.start()
        let (a, b) = ("1-" + String(repeating: "a", count: 32), "1-" + String(repeating: "b", count: 32))
        let leaves = [a, b].map { #"{"_id":"twice","_rev":"\#($0)","n":1}"# }.joined(separator: ",")
        let imported = try agent.ctl(["import", "-"], stdin: #"{"docs":[\#(leaves)],"new_edits":false}"#)
        #expect(imported.status == 0, "\(imported.stderr)")
        let client = try NodeClient(directory: agent.dataDir)
        #expect(try await client.conflictedDocumentIDs() == ["twice"])
        let document = try #require(try await client.document(id: "twice"))
        #expect(Set([document.revision] + document.conflicts) == Set([a, b].compactMap(RevisionID.init)))
        #expect(document.conflicts.count == 1)
    }

    @Test("a document saved through the client arrives on the events() stream as document.changed", .timeLimit(.minutes(5)))
    func savedDocumentIsAnEvent() async throws {
        try await Self.withClient { client, _ in
            let events = try await client.events()
            let revision = try await client.save(Note(title: "Seen", text: "as an event"), id: "note:event")
            var seen: NodeClient.Event?
            for try await event in events where event.type == "document.changed" {
                if event.data.objectValue?["doc"] == .string("note:event") {
                    seen = event
                    break
                }
            }
            let event = try #require(seen, "the stream ended before the document's event")
            #expect(event.data.objectValue?["rev"] == .string(revision.description))
            #expect(event.data.objectValue?["origin"] == .string("local"))
            #expect(event.sequence > 0)
        }
    }

    @Test("a reader that falls more than eventBufferCount events behind gets them all, then readerTooSlow, and resumes from there without a gap", .timeLimit(.minutes(5)))
    func slowReaderResumes() async throws {
        try await Self.withClient { client, _ in
            let events = try await client.events()
            // Written while nobody reads the stream: well past its bound.
            let written = NodeClient.eventBufferCount + 2_000
            for index in 0..<written { try await client.save(json: .object(["n": .int(Int64(index))]), id: "slow-\(index)") }
            var received: [Int64] = []
            var ending: (any Error)?
            do { for try await event in events { received.append(event.sequence) } } catch { ending = error }
            #expect(received.count == NodeClient.eventBufferCount)
            guard case .readerTooSlow(let buffered, let last)? = ending as? NodeClientError else {
                Issue.record("the stream ended with \(String(describing: ending))")
                return
            }
            #expect(buffered == NodeClient.eventBufferCount && last == received.last)
            var resumed = try await client.events(since: last).makeAsyncIterator()
            #expect(try await resumed.next()?.sequence == last + 1, "the next event comes next")
        }
    }

    @Test("cancelling the task iterating events() ends the stream, and the client goes on serving requests", .timeLimit(.minutes(5)))
    func cancellingEndsTheEventStream() async throws {
        try await Self.withClient { client, _ in
            let events = try await client.events()
            let watcher = Task {
                var count = 0
                for try await _ in events { count += 1 }
                return count
            }
            watcher.cancel()
            _ = try await watcher.value
            #expect(try await client.save(json: .object(["after": .bool(true)]), id: "after-cancel").generation == 1)
        }
    }

    @Test("the events() stream ends when the agent stops", .timeLimit(.minutes(5)))
    func eventStreamEndsWithTheAgent() async throws {
        try await Self.withClient { client, agent in
            let events = try await client.events(since: 0)
            agent.signal(SIGTERM)
            var types: [String] = []
            for try await event in events { types.append(event.type) }
            #expect(types.first == "agent.started", "events since 0 start with the agent's first: \(types)")
            #expect(types.last == "agent.stopping", "\(types)")
        }
    }

    @Test("two agents peered: sync(peer:) returns once the document saved on one is on the other, and peers() lists the peer", .timeLimit(.minutes(5)))
    func syncReplicates() async throws {
        let (a, b) = try AgentProcess.peeredPair()
        let clientA = try NodeClient(directory: a.dataDir)
        let clientB = try NodeClient(directory: b.dataDir)
        try await clientA.save(Note(title: "Travels", text: "from a to b"), id: "note:sync")
        let outcome = try await clientA.sync(peer: b.nodeID)
        #expect(outcome.rejected == 0 && outcome.refusedByPeer == 0)
        #expect(try await clientB.document(id: "note:sync", as: Note.self) == Note(title: "Travels", text: "from a to b"))
        let peers = try await clientA.peers()
        let peer = try #require(peers.first { $0.nodeID == b.nodeID }, "\(peers)")
        #expect(peer.address != nil && peer.direction == "both" && peer.lastError == nil)
        // The row `peers` and `status` send, typed: the replication's state and a row per database.
        #expect(peer.state != .error && peer.databases.map(\.db) == ["default"], "\(peer)")
        let unknown = await #expect(throws: NodeClientError.self) { try await clientA.sync(peer: testNodeID(9)) }
        #expect(unknown?.code == "not_found")
    }

    @Test("connecting where no agent runs fails with cannotConnect naming the path", .timeLimit(.minutes(5)))
    func noAgent() throws {
        let directory = TemporaryDirectory()
        let path = directory.path + "/admin.sock"
        let error = #expect(throws: NodeClientError.self) { try NodeClient(socket: path) }
        guard case .cannotConnect(let named, _)? = error else {
            Issue.record("not cannotConnect: \(String(describing: error))")
            return
        }
        #expect(named == path)
        #expect(error?.description.hasPrefix("cannot connect: no agent at \(path)") == true)
        #expect(throws: NodeClientError.self) { try NodeClient(directory: directory.path) }
    }
}
