import CanopyTestSupport
import CanopyAgent
import CanopyCore
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

private func mode(_ path: String) -> mode_t? {
    var info = stat()
    guard stat(path, &info) == 0 else { return nil }
    return info.st_mode & 0o777
}

@Suite("canopyd lifecycle, with real processes", .serialized)
struct AgentLifecycleTests {
    @Test("init creates a private directory and key, prints the node id last, and refuses to run twice")
    func initCreatesDirectory() throws {
        let temporary = TemporaryDirectory()
        let dir = temporary.path + "/data"
        let first = try run(Binaries.canopyd, ["init", "--data-dir", dir, "--conflicts", "manual"])
        #expect(first.status == 0)
        let nodeID = String(first.stdout.split(separator: "\n").last ?? "")
        #expect(AgentIdentity.normalizeNodeID(nodeID) == nodeID)
        #expect(mode(dir) == 0o700)
        #expect(mode(dir + "/identity.key") == 0o600)
        #expect(FileManager.default.fileExists(atPath: dir + "/canopy.sqlite"))
        let config = try String(contentsOfFile: dir + "/canopy.conf", encoding: .utf8)
        #expect(config.contains("conflicts = manual"))

        let id = try run(Binaries.canopyd, ["id", "--data-dir", dir])
        #expect(id.status == 0)
        #expect(id.stdout == nodeID + "\n")

        let keyBefore = try Data(contentsOf: URL(fileURLWithPath: dir + "/identity.key"))
        let again = try run(Binaries.canopyd, ["init", "--data-dir", dir])
        #expect(again.status == 1)
        #expect(again.stderr.contains("refusing to overwrite"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: dir + "/identity.key")) == keyBefore)
    }

    @Test("init creates missing parent directories, as mkdir -p does, and the data directory stays private")
    func initCreatesParents() throws {
        let temporary = TemporaryDirectory()
        let dir = temporary.path + "/not/yet/there/data"
        let result = try run(Binaries.canopyd, ["init", "--data-dir", dir])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(mode(dir) == 0o700)
        #expect(FileManager.default.fileExists(atPath: dir + "/identity.key"))
    }

    @Test("init and id take a data directory named relative to the working directory, a single name included")
    func relativeDirectory() throws {
        let temporary = TemporaryDirectory()
        for name in ["n", "node", "./dot", "nested/deeper"] {
            let made = try run(Binaries.canopyd, ["init", "--data-dir", name, "--listen", "127.0.0.1:0"], in: temporary.path)
            #expect(made.status == 0, "\(name): \(made.stderr)")
            #expect(FileManager.default.fileExists(atPath: temporary.path + "/" + name + "/identity.key"), "\(name)")
            let id = try run(Binaries.canopyd, ["id", "--data-dir", name], in: temporary.path)
            #expect(id.status == 0 && made.stdout.hasSuffix(id.stdout), "\(name): \(id.stderr)")
        }
    }

    @Test("a second agent on the same data directory refuses to start with exit code 1")
    func secondAgentRefuses() throws {
        let agent = try AgentProcess()
        try agent.start()
        let second = try run(Binaries.canopyd, ["run", "--data-dir", agent.dataDir, "--admin-socket", agent.temporary.path + "/other.sock"])
        #expect(second.status == 1)
        #expect(second.stderr.contains("another canopyd is already running"))
        #expect(try agent.client().request("status")["ok"] == .bool(true))
    }

    @Test("SIGTERM shuts down cleanly: exit 0 and the socket is removed")
    func sigtermExitsCleanly() throws {
        let agent = try AgentProcess()
        try agent.start()
        #expect(FileManager.default.fileExists(atPath: agent.socketPath))
        agent.signal(SIGTERM)
        try waitForExit(agent.process)
        #expect(agent.process.terminationReason == .exit)
        #expect(agent.process.terminationStatus == 0)
        #expect(!FileManager.default.fileExists(atPath: agent.socketPath))
    }

    @Test("the admin shutdown command stops the agent with exit 0")
    func adminShutdownExits() throws {
        let agent = try AgentProcess()
        try agent.start()
        #expect(try agent.ctl(["shutdown"]).status == 0)
        try waitForExit(agent.process)
        #expect(agent.process.terminationStatus == 0)
        #expect(!FileManager.default.fileExists(atPath: agent.socketPath))
    }

    /// `canopyd run` on `agent`'s data directory, started apart from the harness, once its admin
    /// socket answers as `agent`'s node.
    static func runUntilServing(_ agent: AgentProcess) throws -> ChildProcess {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: Binaries.canopyd)
        process.arguments = ["run", "--data-dir", agent.dataDir]
        process.standardError = FileHandle.nullDevice
        try process.run()
        do {
            try poll("the agent's socket") {
                (try? AdminSocketClient(path: agent.socketPath, receiveTimeoutSeconds: 10).request("status")["node_id"]) == .string(agent.nodeID)
            }
        } catch {
            kill(process.processIdentifier, SIGKILL)
            throw error
        }
        return process
    }

    @Test("SIGTERM the moment the admin socket first answers stops the agent cleanly, every time")
    func termAsSoonAsServing() throws {
        let agent = try AgentProcess()
        for _ in 0..<10 {
            let process = try Self.runUntilServing(agent)
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
            kill(process.processIdentifier, SIGTERM)
            try poll("the agent to exit after SIGTERM") { !process.isRunning }
            #expect(process.terminationReason == .exit && process.terminationStatus == 0)
        }
    }

    @Test("a socket left by a killed agent is replaced, and a live one is never stolen")
    func staleSocketIsReplaced() throws {
        let agent = try AgentProcess()
        try agent.start()
        // Another data dir pointed at the live socket must not take it over.
        let intruder = try AgentProcess()
        let stolen = try run(Binaries.canopyd, ["run", "--data-dir", intruder.dataDir, "--admin-socket", agent.socketPath])
        #expect(stolen.status == 1)
        #expect(stolen.stderr.contains("already answering"))
        #expect(try agent.client().request("status")["ok"] == .bool(true))

        agent.signal(SIGKILL)
        try waitForExit(agent.process)
        #expect(FileManager.default.fileExists(atPath: agent.socketPath))  // left behind
        let restarted = try Self.runUntilServing(agent)
        defer { if restarted.isRunning { kill(restarted.processIdentifier, SIGKILL) } }
        // SIGTERM the moment it answers: it stops cleanly (the signal is not lost while it starts).
        restarted.terminate()
        try poll("the restarted agent to exit") { !restarted.isRunning }
        #expect(restarted.terminationReason == .exit && restarted.terminationStatus == 0)
    }

    @Test("SIGHUP reloads the config: a peer added to the file appears without a restart")
    func sighupReloads() throws {
        let agent = try AgentProcess()
        try agent.start()
        let peer = testNodeID(3)
        let configPath = agent.dataDir + "/canopy.conf"
        let text = try String(contentsOfFile: configPath, encoding: .utf8)
        try (text + "\n[peer \(peer)]\naddress = 127.0.0.1:9\ndirection = pull\n").write(toFile: configPath, atomically: true, encoding: .utf8)
        agent.signal(SIGHUP)
        try poll("the reloaded peer to be listed") {
            guard case .array(let peers)? = try agent.client().request("peers")["peers"] else { return false }
            return peers.contains { $0.objectValue?["node_id"] == .string(peer) && $0.objectValue?["direction"] == .string("pull") }
        }
        // A broken file is reported and the running config kept.
        try (text + "\nbogus line\n").write(toFile: configPath, atomically: true, encoding: .utf8)
        let reload = try agent.client().request("reload")
        #expect(reload["ok"] == .bool(false))
        if case .object(let error)? = reload["error"], case .string(let message)? = error["message"] {
            #expect(message.contains("canopy.conf:"))
        } else {
            Issue.record("reload of a bad file did not fail: \(reload)")
        }
        #expect(try agent.client().request("status")["ok"] == .bool(true))
    }

    @Test("a [peer OWN-NODE-ID] section written by hand is refused naming it: by reload (the running config kept) and at start (exit 1)")
    func ownNodeAsPeerIsRefused() throws {
        let agent = try AgentProcess()
        try agent.start()
        let configPath = agent.dataDir + "/canopy.conf"
        let text = try String(contentsOfFile: configPath, encoding: .utf8)
        let headerLine = text.split(separator: "\n", omittingEmptySubsequences: false).count + 1
        // Written as a reader might: lowercase, with the dashes.
        try (text + "\n[peer \(agent.nodeID.lowercased())]\naddress = 127.0.0.1:9\n").write(toFile: configPath, atomically: true, encoding: .utf8)
        let said = "canopy.conf:\(headerLine): [peer \(agent.nodeID)] is this node's own id: a node does not replicate with itself; remove the section"
        let reload = try agent.ctl(["reload"])
        #expect(reload.status == 1)
        #expect(reload.stderr.contains(said), "\(reload.stderr)")
        let events = try agent.client()
        _ = try events.request("events")
        agent.signal(SIGHUP)
        var reported: String?
        while reported == nil {
            guard let event = try events.readObject()["event"]?.objectValue, event["type"] == .string("config.error") else { continue }
            if case .string(let message)? = event["data"]?.objectValue?["message"] { reported = message } else { reported = "" }
        }
        #expect(reported?.contains(said) == true, "SIGHUP reports it as config.error: \(reported ?? "")")
        #expect(try agent.client().request("peers")["peers"] == .array([]), "the running config is kept")
        #expect(try agent.ctl(["shutdown"]).status == 0)
        let started = try run(Binaries.canopyd, ["run", "--data-dir", agent.dataDir])
        #expect(started.status == 1)
        #expect(started.stderr.contains(said), "\(started.stderr)")
    }
}
