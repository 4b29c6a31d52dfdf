import Canopy
import Foundation
import Testing

/// What `Replicator.sync()` promises an application, checked as an app would use it: two nodes
/// in one process over encrypted loopback TCP.
@Suite("Replicator.sync as an application relies on it", .serialized)
struct ReplicatorSyncTests {
    /// Two fresh nodes, stopped after `body`.
    func withTwoNodes(_ body: (Node, Node) async throws -> Void) async throws {
        let directory = TemporaryDirectory()
        let a = try Node(directory: directory.path("a"))
        let b = try Node(directory: directory.path("b"))
        do { try await body(a, b) } catch { Issue.record(error) }
        await b.stop()
        await a.stop()
    }

    @Test("a second one-shot sync carries the writes made after the first, every time, and counts them", arguments: 0..<30)
    func repeatedOneShotSync(round: Int) async throws {
        try await withTwoNodes { a, b in
            a.replicator(ReplicatorConfiguration(peer: b.nodeID, continuous: false)).start()
            let replicator = b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: a.listenAddress, continuous: false))
            try await replicator.sync()
            try await a.database.save(Note(title: "A", text: "round \(round)"), id: "note:a")
            try await b.database.save(Note(title: "B", text: "round \(round)"), id: "note:b")
            let outcome = try await replicator.sync()
            #expect(try await b.database.document(id: "note:a", as: Note.self) == Note(title: "A", text: "round \(round)"))
            #expect(try await a.database.document(id: "note:b", as: Note.self) == Note(title: "B", text: "round \(round)"))
            #expect(outcome.received == 1 && outcome.sent == 1, "\(outcome)")
            replicator.stop()
        }
    }

    @Test("a push-only sync that pushed a document says it sent it")
    func pushOnlySyncCounts() async throws {
        try await withTwoNodes { a, b in
            a.replicator(ReplicatorConfiguration(peer: b.nodeID, continuous: false)).start()
            let replicator = b.replicator(ReplicatorConfiguration(
                peer: a.nodeID, address: a.listenAddress, direction: .push, continuous: false))
            try await replicator.sync()
            try await b.database.save(Note(title: "B", text: "pushed"), id: "note:b")
            let outcome = try await replicator.sync()
            #expect(outcome.sent == 1 && outcome.received == 0 && outcome.completed >= 1, "\(outcome)")
            #expect(try await a.database.document(id: "note:b", as: Note.self) == Note(title: "B", text: "pushed"))
            replicator.stop()
        }
    }

    @Test("a replicator whose peer does not allow this node says why, and a sync waiting on it ends when its task is cancelled", .timeLimit(.minutes(1)))
    func peerThatDoesNotAllowThisNode() async throws {
        try await withTwoNodes { a, b in
            let replicator = b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: a.listenAddress))
            replicator.start()
            var reason: ReplicatorError?
            for _ in 0..<1500 where reason == nil {
                reason = replicator.lastError
                if reason == nil { try await Task.sleep(for: .milliseconds(20)) }
            }
            #expect(reason?.message.contains("does not allow this node") == true, "\(String(describing: reason))")
            let waiting = Task { () throws(ReplicatorError) -> Replicator.SyncOutcome in try await replicator.sync() }
            // A moment for the call to reach the agent's wait (a cancellation before it is handled too).
            try await Task.sleep(for: .milliseconds(200))
            waiting.cancel()
            let result = await waiting.result
            guard case .failure(let error) = result else {
                Issue.record("the sync returned although the peer never allowed this node: \(result)")
                return
            }
            #expect((error as? ReplicatorError)?.code == "cancelled", "\(error)")
            // Allowed afterwards, the same replicator replicates: the cancelled wait left nothing behind.
            try await a.database.save(Note(title: "A", text: "after"), id: "note:a")
            try await a.allow(b.nodeID)
            try await replicator.sync()
            #expect(try await b.database.document(id: "note:a", as: Note.self) == Note(title: "A", text: "after"))
            #expect(replicator.lastError == nil, "\(String(describing: replicator.lastError))")
            replicator.stop()
        }
    }

    @Test("a sync with a peer that does not share a database back returns, naming it, with the others synced")
    func databaseNotSharedBack() async throws {
        try await withTwoNodes { a, b in
            _ = try await a.createDatabase("notes")
            _ = try await b.createDatabase("notes")
            a.replicator(ReplicatorConfiguration(peer: b.nodeID)).start()
            let replicator = b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: a.listenAddress))
            replicator.start()
            try await b.share("notes", with: a.nodeID, access: .readWrite)
            try await a.database.save(Note(title: "A", text: "default"), id: "note:a")
            let outcome = try await replicator.sync()
            #expect(outcome.notSharedByPeer == ["notes"], "\(outcome)")
            #expect(try await b.database.document(id: "note:a", as: Note.self) == Note(title: "A", text: "default"))
            try await a.share("notes", with: b.nodeID, access: .read)
            let oneWay = try await replicator.sync()
            #expect(oneWay.notSharedByPeer.isEmpty && oneWay.peerTakesPart == ["notes": "nothing"], "\(oneWay)")
            replicator.stop()
        }
    }
}
