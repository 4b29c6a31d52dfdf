import CanopyTestSupport
import CanopyCore
import CanopyCrypto
import CanopyReplication
import CanopyStore
import CanopyWire
import Dispatch
import Foundation
import Testing

@testable import CanopyAgent

#if canImport(Glibc)
import Glibc
#endif

/// A peer that breaks the protocol against a real `canopyd` process, its peer table read with
/// `canopyctl`: every violation is counted for the peer and named, and the log says so without a
/// line per violation.
@Suite("a lying peer against a canopyd process", .serialized)
struct LyingPeerProcessTests {
    /// `canopyd` and `canopyctl`, built next to the test bundle by `swift build --build-tests`.
    static let binaries: String = {
        var url = URL(fileURLWithPath: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0])
        while !FileManager.default.isExecutableFile(atPath: url.deletingLastPathComponent().appendingPathComponent("canopyd").path),
            url.pathComponents.count > 1
        {
            url.deleteLastPathComponent()
        }
        return url.deletingLastPathComponent().path
    }()

    /// Runs `tool` with `arguments` to completion; its exit status and standard output.
    static func run(_ tool: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: binaries + "/" + tool)
        process.arguments = arguments
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    /// Waits up to 30 s for `condition`.
    static func waitFor(_ what: String, _ condition: () throws -> Bool) throws {
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if try condition() { return }
            usleep(20_000)
        }
        throw SystemError("waiting for \(what)", code: ETIMEDOUT)
    }

    /// Connects as `liar` and sends the connection hello; the transport and what it receives.
    /// The agent's peer listen address and node id, from its `status`.
    static func listenAddressAndNode(_ admin: AdminSocketClient) throws -> (HostPort, NodeID) {
        let status = try admin.request("status")
        guard case .string(let listen)? = status["listen"], let address = HostPort(parsing: listen),
            case .string(let agentID)? = status["node_id"], let agentNode = AgentIdentity.nodeID(agentID)
        else { throw SystemError("reading a listen address and node id in \(status)", code: EPROTO) }
        return (address, agentNode)
    }

    static func connectedLiar(_ address: HostPort, _ liar: Identity, _ agent: NodeID) throws -> (ChannelTransport, ConnectionEventLog) {
        let transport = try LyingPeerTests.connect(to: address, as: liar, expecting: agent, delivery: DispatchQueue(label: "test.liar.delivery"))
        let received = ConnectionEventLog()
        transport.start { received.append($0) }
        transport.send(.hello(ConnectionHello(nodeID: [UInt8](repeating: 9, count: 16))))
        #expect(received.next { if case .message(.hello) = $0 { true } else { false } } != nil, "the agent answers with its connection hello")
        return (transport, received)
    }

    @Test("a peer pushing revisions nobody asked for and writing to channels never opened: each violation counted in its peers row with the last one named, shown by canopyctl peers, and logged once per interval")
    func violationsAreCountedNamedAndLogged() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("canopy-liar-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        let data = root + "/data"
        #expect(try Self.run("canopyd", ["init", "--data-dir", data, "--listen", "127.0.0.1:0"]).status == 0)
        let agent = ChildProcess()
        agent.executableURL = URL(fileURLWithPath: Self.binaries + "/canopyd")
        agent.arguments = ["run", "--data-dir", data]
        let logPath = root + "/canopyd.log"
        FileManager.default.createFile(atPath: logPath, contents: nil)
        agent.standardError = FileHandle(forWritingAtPath: logPath)
        agent.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        try agent.run()
        defer {
            kill(agent.processIdentifier, SIGKILL)
            agent.waitUntilExit()
        }
        let socket = data + "/admin.sock"
        try Self.waitFor("the admin socket") { (try? AdminSocketClient(path: socket, receiveTimeoutSeconds: 10).request("status")["ok"]) == .bool(true) }
        let admin = try AdminSocketClient(path: socket, receiveTimeoutSeconds: 60)
        let (address, agentNode) = try Self.listenAddressAndNode(admin)
        var entropy = DeterministicEntropy(seed: [UInt8](repeating: 9, count: DeterministicEntropy.seedBytes))
        let liar = Identity.generate(random: &entropy)
        let liarID = liar.nodeID.description
        #expect(try admin.request("peer.add", ["node_id": .string(liarID), "address": .string("-")])["ok"] == .bool(true))

        // Revisions pushed into `default`, never asked for: the channel ends.
        let (transport, received) = try Self.connectedLiar(address, liar, agentNode)
        transport.send(.attach(Attach(channel: 3, database: .default)))
        #expect(received.next { if case .message(.attach) = $0 { true } else { false } } != nil, "default was not opened")
        transport.send(.channel(3, .hello(Hello(databaseID: [UInt8](repeating: 7, count: 16), revsLimit: 1000, window: 4))))
        let forged = RevisionTransfer(ancestry: [], knownAncestorTail: 0, body: Array(#"{"forged":true}"#.utf8))
        transport.send(.channel(3, .revisions(Revisions(requestID: 77, final: true, revisions: [forged]))))
        #expect(received.next { if case .message(.detach(let d)) = $0 { d.channel == 3 } else { false } } != nil, "the channel was not ended")
        // A message for a channel never opened: the connection ends.
        transport.send(.channel(41, .heartbeat))
        #expect(received.next { if case .message(.close) = $0 { true } else { false } } != nil, "the connection was not closed")
        // Again, on a new connection.
        let (again, receivedAgain) = try Self.connectedLiar(address, liar, agentNode)
        again.send(.channel(42, .heartbeat))
        #expect(receivedAgain.next { if case .message(.close) = $0 { true } else { false } } != nil, "the second connection was not closed")

        var row: [String: JSONValue] = [:]
        try Self.waitFor("three violations in the peer's row") {
            guard case .array(let rows)? = try admin.request("peers")["peers"] else { return false }
            row = rows.compactMap(\.objectValue).first { $0["node_id"] == .string(liarID) } ?? [:]
            return row["protocol_violations"] == .int(3)
        }
        guard case .string(let last)? = row["last_protocol_violation"] else {
            Issue.record("no last_protocol_violation in \(row)")
            return
        }
        #expect(last.hasPrefix("connection: ") && last.contains("42"), "\(last)")

        let table = try Self.run("canopyctl", ["--data-dir", data, "peers"])
        #expect(table.status == 0)
        #expect(table.output.contains("VIOLATIONS"), "\(table.output)")
        #expect(table.output.contains("\(liarID) broke the protocol 3 times; the last: connection: "), "\(table.output)")

        let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        let warnings = log.split(separator: "\n").filter { $0.contains("a peer broke the replication protocol") }
        #expect(warnings.count == 1, "\(log)")
        #expect(warnings.first?.contains("peer=\(liarID)") == true, "\(log)")
    }

    /// A `canopyd run` process on `data`, logging to `log`, its admin socket answering.
    static func startAgent(_ data: String, log: String) throws -> ChildProcess {
        let agent = ChildProcess()
        agent.executableURL = URL(fileURLWithPath: binaries + "/canopyd")
        agent.arguments = ["run", "--data-dir", data]
        if !FileManager.default.fileExists(atPath: log) { FileManager.default.createFile(atPath: log, contents: nil) }
        let handle = FileHandle(forWritingAtPath: log)
        handle?.seekToEndOfFile()
        agent.standardError = handle
        agent.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        try agent.run()
        try waitFor("the admin socket") {
            guard agent.isRunning else { throw SystemError("canopyd exited", code: ECHILD) }
            return (try? AdminSocketClient(path: data + "/admin.sock", receiveTimeoutSeconds: 10).request("status")["ok"]) == .bool(true)
        }
        return agent
    }

    /// Stops the agent with `canopyctl shutdown` (its log emptied into the database file), then
    /// lists the local documents of `default` whose ids start with `prefix`.
    static func stopAndListLocal(_ data: String, _ agent: ChildProcess, prefix: String) throws -> [String] {
        #expect(try run("canopyctl", ["--data-dir", data, "shutdown"]).status == 0)
        agent.waitUntilExit()
        return try DocumentStore(path: data + "/canopy.sqlite").localIDs(withPrefix: prefix)
    }

    @Test("a read-only peer storing 100 checkpoint records keeps at most 64, the oldest gone and the newest kept, and none once it is removed")
    func checkpointRecordsAreBoundedAndForgotten() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("canopy-liar-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        let data = root + "/data"
        let logPath = root + "/canopyd.log"
        #expect(try Self.run("canopyd", ["init", "--data-dir", data, "--listen", "127.0.0.1:0"]).status == 0)
        var agent = try Self.startAgent(data, log: logPath)
        defer {
            if agent.isRunning {
                kill(agent.processIdentifier, SIGKILL)
                agent.waitUntilExit()
            }
        }
        let admin = try AdminSocketClient(path: data + "/admin.sock", receiveTimeoutSeconds: 60)
        let (address, agentNode) = try Self.listenAddressAndNode(admin)
        var entropy = DeterministicEntropy(seed: [UInt8](repeating: 13, count: DeterministicEntropy.seedBytes))
        let liar = Identity.generate(random: &entropy)
        let liarID = liar.nodeID.description
        // It may only read: this node pushes to it, and keeps its checkpoints for it.
        #expect(try admin.request("peer.add", ["node_id": .string(liarID), "address": .string("-"), "direction": .string("push")])["ok"] == .bool(true))

        let (transport, received) = try Self.connectedLiar(address, liar, agentNode)
        transport.send(.attach(Attach(channel: 3, database: .default)))
        #expect(received.next { if case .message(.attach) = $0 { true } else { false } } != nil, "default was not opened")
        transport.send(.channel(3, .hello(Hello(databaseID: [UInt8](repeating: 7, count: 16), revsLimit: 1000, window: 4))))
        let value = ReplicationCheckpoint(current: .init(session: "s", sequence: 0)).encoded()
        let ids = (0..<100).map { index in [UInt8](repeating: 0x40, count: 14) + [UInt8(index / 256), UInt8(index % 256)] }
        for (index, id) in ids.enumerated() {
            transport.send(.channel(3, .checkpointSet(CheckpointSet(requestID: RequestID(index + 1), replicationID: id, value: value))))
        }
        for _ in ids {
            #expect(received.next { if case .message(.channel(3, .checkpointSetAck)) = $0 { true } else { false } } != nil, "a set was not acknowledged")
        }
        // The first one written went to make room; the last is kept.
        for (requestID, id, kept) in [(RequestID(501), ids[0], false), (RequestID(502), ids[99], true)] {
            transport.send(.channel(3, .checkpointGet(CheckpointGet(requestID: requestID, replicationID: id))))
            guard case .message(.channel(3, .checkpoint(let answer)))? = received.next(where: {
                if case .message(.channel(3, .checkpoint(let c))) = $0 { c.requestID == requestID } else { false }
            }) else {
                Issue.record("checkpointGet \(requestID) was not answered")
                return
            }
            #expect((answer.value != nil) == kept, "\(answer)")
        }
        transport.close(.localClosed)

        let prefix = ReplicationIdentity.peerCheckpointPrefix(peer: PeerReplicator.peerHorizonKey(liarID))
        let kept = try Self.stopAndListLocal(data, agent, prefix: prefix)
        #expect(kept.count == AgentLimits.peerCheckpointsMax, "\(kept.count) records kept")
        #expect(kept.contains(ReplicationIdentity.peerCheckpointDocumentID(peer: PeerReplicator.peerHorizonKey(liarID), ids[99])))

        agent = try Self.startAgent(data, log: logPath)
        #expect(try Self.run("canopyctl", ["--data-dir", data, "peer", "remove", liarID]).status == 0)
        #expect(try Self.stopAndListLocal(data, agent, prefix: prefix).isEmpty, "a removed peer's records are forgotten")
    }
}
