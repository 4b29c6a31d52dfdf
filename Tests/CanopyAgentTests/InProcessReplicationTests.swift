import CanopyCore
import CanopyStore
import Foundation
import Logging
import Testing

@testable import CanopyAgent

/// Two real agents in this process: real data directories, real TCP on loopback, the real
/// handshake and encrypted channel, the real replication engine.
@Suite("Replication between two agents in one process over encrypted loopback TCP", .serialized)
struct InProcessReplicationTests {
    final class Node {
        let root: URL
        let agent: Agent
        let socket: String

        init(name: String) throws {
            root = FileManager.default.temporaryDirectory.appendingPathComponent("canopy-inproc-\(name)-\(UUID().uuidString)")
            let directory = DataDirectory(path: root.path)
            let lock = try AgentSetup.initializeKeepingLock(directory: directory, config: AgentConfig(listen: HostPort(host: "127.0.0.1", port: 0)))
            var logger = Logger(label: "canopy.test.\(name)")
            logger.logLevel = .warning
            var options = AgentOptions(directory: directory, logger: logger)
            options.heldLock = lock
            agent = try Agent(options: options, environment: [:])
            socket = directory.adminSocketPath
            try agent.start()
        }

        func allow(_ other: Node) throws {
            let address = other.agent.queue.sync { other.agent.listening!.address.description }
            let response = try AdminSocketClient(path: socket, receiveTimeoutSeconds: 60).request(
                "peer.add", ["node_id": .string(other.agent.nodeID), "address": .string(address)])
            #expect(response["ok"] == .bool(true))
        }

        func stop() {
            let done = DispatchSemaphore(value: 0)
            agent.shutdown { done.signal() }
            _ = done.wait(timeout: .now() + 20)
            try? FileManager.default.removeItem(at: root)
        }
    }

    /// Waits until `condition` holds, re-checking after every commit of the given stores (no
    /// polling). The bound only guards against a hang; it is not what the test measures.
    private func eventually(_ what: String, stores: [DocumentStore], seconds: Double = 120, _ condition: () throws -> Bool) throws {
        let commits = DispatchSemaphore(value: 0)
        let tokens = stores.map { $0.addCommitObserver { commits.signal() } }
        defer { tokens.forEach { $0.cancel() } }
        let deadline = DispatchTime.now() + seconds
        while try !condition() {
            guard commits.wait(timeout: deadline) == .success else {
                Issue.record("timed out waiting for \(what)")
                return
            }
        }
    }

    @Test("10k documents written on both agents replicate both ways and converge")
    func tenThousandBothWays() throws {
        let a = try Node(name: "a")
        let b = try Node(name: "b")
        defer {
            a.stop()
            b.stop()
        }
        for (node, prefix) in [(a, "a"), (b, "b")] {
            var writes: [LocalWrite] = []
            for index in 0..<5000 {
                writes.append(LocalWrite(documentID: "\(prefix)-\(index)", body: .object(["n": .int(Int64(index))]), replacing: nil))
                if writes.count == 1000 {
                    _ = try node.agent.store.putBatch(writes)
                    writes = []
                }
            }
        }
        try a.allow(b)
        try b.allow(a)
        try eventually("both agents to hold 10k documents", stores: [a.agent.store, b.agent.store]) {
            try a.agent.store.documentCount == 10_000 && b.agent.store.documentCount == 10_000
        }
        // Same current revision for every document on both sides.
        let left = try a.agent.store.changes(since: 0, limit: 20_000).map { "\($0.documentID) \($0.current)" }.sorted()
        let right = try b.agent.store.changes(since: 0, limit: 20_000).map { "\($0.documentID) \($0.current)" }.sorted()
        #expect(left == right)
        #expect(left.count == 10_000)
    }
    @Test("a peer added gets a peer horizon that holds stemming back, and removing the peer forgets it")
    func peerHorizonFollowsConfiguration() throws {
        let a = try Node(name: "horizon-a")
        let b = try Node(name: "horizon-b")
        defer {
            a.stop()
            b.stop()
        }
        let key = "peer/" + b.agent.nodeID
        try a.allow(b)
        // The config is applied on the replication queue; this waits for that block.
        a.agent.replicationQueue.sync {}
        #expect(a.agent.store.peerHorizons.contains { $0.peer == key })

        let response = try AdminSocketClient(path: a.socket, receiveTimeoutSeconds: 60).request(
            "peer.remove", ["node_id": .string(b.agent.nodeID)])
        #expect(response["ok"] == .bool(true))
        a.agent.replicationQueue.sync {}
        #expect(!a.agent.store.peerHorizons.contains { $0.peer == key })
    }
}
