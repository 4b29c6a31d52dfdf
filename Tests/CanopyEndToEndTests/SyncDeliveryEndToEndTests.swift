import CanopyTestSupport
import CanopyAgent
import CanopyCore
import Foundation
import Testing

/// What `canopyctl sync --wait` tells a user when a sync cannot move everything it was asked to,
/// and what a wait that is given up leaves behind, between real agents and real canopyctl
/// processes.
@Suite("sync delivery at the edges, between real agents", .serialized)
struct SyncDeliveryEndToEndTests {
    /// `admin_clients` of `stats` (the asking connection included).
    static func adminClients(_ agent: AgentProcess) throws -> Int64 {
        guard case .int(let count)? = try agent.client().request("stats")["admin_clients"] else { return -1 }
        return count
    }

    /// Starts `canopyctl` with `arguments` against `agent`, its output thrown away.
    static func launch(_ agent: AgentProcess, _ arguments: [String]) throws -> ChildProcess {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: Binaries.canopyctl)
        process.arguments = ["--data-dir", agent.dataDir] + arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        return process
    }

    @Test("sync --wait calls that time out against an offline peer free their admin slots: after 80 of them every command still works")
    func abandonedWaitsFreeTheirSlots() throws {
        let a = try AgentProcess()
        try a.start()
        let offline = testNodeID(41)
        #expect(try a.ctl(["peer", "add", offline, "127.0.0.1:9"]).status == 0)
        // Four waves of 20 at once: more than the 64 slots in all, never more than 20 at a time.
        for wave in 0..<4 {
            let processes = try (0..<20).map { _ in try Self.launch(a, ["sync", offline, "--wait", "--timeout", "0.3"]) }
            for process in processes { try waitForExit(process) }
            #expect(processes.allSatisfy { $0.terminationStatus == 1 }, "wave \(wave): every wait ends by its timeout")
        }
        try poll("the abandoned waits' connections to close") { try Self.adminClients(a) == 1 }
        let status = try a.ctl(["status"])
        #expect(status.status == 0, "status after 80 abandoned waits: \(status.stderr)")
        #expect(try a.ctl(["put", "after", "--body", #"{"ok":true}"#]).status == 0)
    }

    // The test runner's children inherit its blocked signals, so SIGINT would not reach
    // canopyctl here; SIGKILL ends it the same way for the agent: its socket closes.
    @Test("a sync --wait whose canopyctl is killed (Ctrl-C, kill) frees its admin slot at once")
    func interruptedWaitFreesItsSlot() throws {
        let a = try AgentProcess()
        try a.start()
        let offline = testNodeID(42)
        #expect(try a.ctl(["peer", "add", offline, "127.0.0.1:9"]).status == 0)
        let waiting = try Self.launch(a, ["sync", offline, "--wait"])
        try poll("the sync to be waiting") { try Self.adminClients(a) >= 2 }
        kill(waiting.processIdentifier, SIGKILL)
        try waitForExit(waiting)
        try poll("the interrupted wait's connection to close", limitSeconds: 5) { try Self.adminClients(a) == 1 }
    }

    @Test("a half-closed client whose sync waits is let go once it closes its socket completely")
    func halfClosedClientThatLeaves() throws {
        let a = try AgentProcess()
        try a.start()
        let offline = testNodeID(43)
        #expect(try a.ctl(["peer", "add", offline, "127.0.0.1:9"]).status == 0)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            let bytes = Array(a.socketPath.utf8)
            raw.copyBytes(from: bytes.prefix(raw.count - 1))
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        #expect(connected == 0)
        let line = Array(#"{"id":1,"cmd":"sync","node_id":"\#(offline)","wait":true}"#.utf8) + [10]
        #expect(line.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) } == line.count)
        shutdown(fd, Int32(SHUT_WR))
        try poll("the half-closed client to be counted") { try Self.adminClients(a) == 2 }
        close(fd)
        try poll("the client that left to be let go", limitSeconds: 10) { try Self.adminClients(a) == 1 }
    }

    /// Two agents that allow and dial each other, each with a database `notes`.
    static func pairWithNotes() throws -> (AgentProcess, AgentProcess) {
        let (a, b) = try AgentProcess.peeredPair()
        for agent in [a, b] { #expect(try agent.ctl(["db", "create", "notes"]).status == 0) }
        return (a, b)
    }

    @Test("sync --wait with a peer that does not share a database back finishes the others, names it, and exits 1; the peer table says so")
    func databaseNotSharedBack() throws {
        let (a, b) = try Self.pairWithNotes()
        #expect(try a.ctl(["share", "notes", b.nodeID, "--access", "read-write"]).status == 0)
        _ = try a.put("d-1", ["in": .string("default")])
        let synced = try a.ctl(["sync", b.nodeID, "--wait", "--timeout", "60"])
        #expect(synced.status == 1, "\(synced.stdout)\(synced.stderr)")
        #expect(synced.stdout.hasPrefix("synced with \(b.nodeID): "), "\(synced.stdout)")
        #expect(synced.stderr.contains("\(b.nodeID) does not share notes with this node"), "\(synced.stderr)")
        #expect(try b.value(of: "d-1", "in") == .string("default"), "default is shared both ways and was synced")
        let peers = try a.ctl(["peers"]).stdout
        #expect(peers.contains("\(b.nodeID) does not share notes with this node"), "\(peers)")
        let rows = try DatabasesEndToEndTests.json(try a.ctl(["--json", "peers"]))["peers"]?.arrayValue?.first?.objectValue?["databases"]
        let notes = rows?.arrayValue?.compactMap(\.objectValue).first { $0["db"] == .string("notes") }
        #expect(notes?["state"] == .string("unshared"), "\(String(describing: notes))")

        // Shared back, then unshared by the peer: the same answer, and no wait without end.
        #expect(try b.ctl(["share", "notes", a.nodeID, "--access", "read-write"]).status == 0)
        #expect(try a.ctl(["sync", b.nodeID, "--wait", "--timeout", "60"]).status == 0)
        #expect(try b.ctl(["unshare", "notes", a.nodeID]).status == 0)
        let again = try a.ctl(["sync", b.nodeID, "--wait", "--timeout", "60"])
        #expect(again.status == 1 && again.stderr.contains("does not share notes"), "\(again.stdout)\(again.stderr)")
        let json = try a.ctl(["--json", "sync", b.nodeID, "--wait", "--timeout", "60"])
        let reply = try DatabasesEndToEndTests.json(json)
        #expect(reply["not_shared_by_peer"]?.arrayValue?.first?.objectValue?["db"] == .string("notes"), "\(json.stdout)")
    }

    @Test("a node whose peer shares a database with it read-only is told its writes stay home: peer table, sync output and exit status")
    func readOnlyPeerTakesNoWrites() throws {
        let (a, b) = try Self.pairWithNotes()
        #expect(try a.ctl(["share", "notes", b.nodeID, "--access", "read"]).status == 0)
        #expect(try b.ctl(["share", "notes", a.nodeID, "--access", "read-write"]).status == 0)
        #expect(try b.ctl(["put", "n-b", "--db", "notes", "--body", #"{"from":"b"}"#]).status == 0)
        let synced = try b.ctl(["sync", a.nodeID, "--wait", "--timeout", "60"])
        #expect(synced.status == 1, "\(synced.stdout)\(synced.stderr)")
        #expect(synced.stderr.contains("\(a.nodeID) takes none of this node's writes to notes"), "\(synced.stderr)")
        #expect(try a.ctl(["get", "n-b", "--db", "notes"]).status == 4, "a read-only share: a never pulls")
        let table = try b.ctl(["peers"]).stdout
        #expect(table.contains("takes none of this node's writes to notes"), "\(table)")
        let rows = try DatabasesEndToEndTests.json(try b.ctl(["--json", "peers"]))["peers"]?.arrayValue?.first?.objectValue?["databases"]
        let notes = rows?.arrayValue?.compactMap(\.objectValue).first { $0["db"] == .string("notes") }
        #expect(notes?["peer_takes"] == .string("nothing"), "\(String(describing: notes))")
        // The node that shares read-only pushes everything b asks for: its sync is clean.
        #expect(try a.ctl(["put", "n-a", "--db", "notes", "--body", #"{"from":"a"}"#]).status == 0)
        let fromA = try a.ctl(["sync", b.nodeID, "--wait", "--timeout", "60"])
        #expect(fromA.status == 0, "\(fromA.stdout)\(fromA.stderr)")
        #expect(try b.ctl(["get", "n-a", "--db", "notes"]).status == 0)
    }

    @Test("a node whose peer takes only a prefix of a database is told which, and a refused pull blames the share, not only the direction")
    func prefixPeerTakesPart() throws {
        let (a, b) = try Self.pairWithNotes()
        #expect(try a.ctl(["share", "notes", b.nodeID, "--access", "write", "--prefix", "inbox:"]).status == 0)
        #expect(try b.ctl(["share", "notes", a.nodeID, "--access", "read-write"]).status == 0)
        #expect(try b.ctl(["put", "inbox:1", "--db", "notes", "--body", #"{"to":"a"}"#]).status == 0)
        #expect(try b.ctl(["put", "kept:1", "--db", "notes", "--body", #"{"to":"nobody"}"#]).status == 0)
        let synced = try b.ctl(["sync", a.nodeID, "--wait", "--timeout", "60"])
        #expect(synced.status == 1, "\(synced.stdout)\(synced.stderr)")
        #expect(synced.stderr.contains("\(a.nodeID) takes only ids starting inbox: of this node's writes to notes"), "\(synced.stderr)")
        try poll("inbox:1 on a") { try a.ctl(["get", "inbox:1", "--db", "notes"]).status == 0 }
        #expect(try a.ctl(["get", "kept:1", "--db", "notes"]).status == 4)
        let rows = try DatabasesEndToEndTests.json(try b.ctl(["--json", "peers"]))["peers"]?.arrayValue?.first?.objectValue?["databases"]
        let notes = rows?.arrayValue?.compactMap(\.objectValue).first { $0["db"] == .string("notes") }
        #expect(notes?["peer_takes"] == .string("ids starting inbox:"), "\(String(describing: notes))")
        guard case .string(let error)? = notes?["last_error"] else {
            Issue.record("no last_error for the refused pull: \(String(describing: notes))")
            return
        }
        #expect(error.contains("its share of this database with this node does not allow reading"), "\(error)")
    }

    @Test("sync --wait says what it moved: documents received and sent, in correct English, and 'caught up' when continuous replication had moved them already")
    func syncSaysWhatItMoved() throws {
        let (a, b) = try AgentProcess.peeredPair()
        _ = try a.put("one", ["n": .int(1)])
        try poll("one on b") { try b.value(of: "one", "n") == .int(1) }
        let caughtUp = try b.ctl(["sync", a.nodeID, "--wait", "--timeout", "60"])
        #expect(caughtUp.status == 0, "\(caughtUp.stderr)")
        #expect(caughtUp.stdout.contains("both directions were caught up; nothing to send or receive"), "\(caughtUp.stdout)")
        #expect(!caughtUp.stdout.contains("1 changes"), "\(caughtUp.stdout)")

        // One-shot: the sync itself carries the documents.
        let c = try AgentProcess()
        let d = try AgentProcess()
        try c.start()
        try d.start()
        #expect(try d.ctl(["peer", "add", c.nodeID, "-", "--mode", "once"]).status == 0)
        #expect(try c.ctl(["peer", "add", d.nodeID, try d.listenAddress(), "--mode", "once"]).status == 0)
        #expect(try c.ctl(["sync", d.nodeID, "--wait", "--timeout", "60"]).status == 0)
        _ = try d.put("from-d", ["n": .int(2)])
        _ = try c.put("from-c", ["n": .int(3)])
        let moved = try c.ctl(["sync", d.nodeID, "--wait", "--timeout", "60"])
        #expect(moved.status == 0, "\(moved.stderr)")
        #expect(moved.stdout.contains(": 1 document received, 1 sent ("), "\(moved.stdout)")
        #expect(try c.value(of: "from-d", "n") == .int(2))
        #expect(try d.value(of: "from-c", "n") == .int(3))
    }

    @Test("a node its peer does not allow is told so in its peer row and by sync --wait, not 'channelEndedWithoutFinal'")
    func peerThatDoesNotAllowThisNode() throws {
        let a = try AgentProcess()
        let b = try AgentProcess()
        try a.start()
        try b.start()
        try b.allow(a)  // a has never heard of b: it refuses b after the handshake and lists it as pending
        try poll("b's row to say why") {
            let row = try DatabasesEndToEndTests.json(try b.ctl(["--json", "peers"]))["peers"]?.arrayValue?.first?.objectValue
            guard case .string(let error)? = row?["last_error"] else { return false }
            return error.contains("most likely it does not allow this node")
        }
        let table = try b.ctl(["peers"]).stdout
        #expect(!table.contains("channelEndedWithoutFinal"), "\(table)")
        let waited = try b.ctl(["sync", a.nodeID, "--wait", "--timeout", "1"])
        #expect(waited.status == 1 && waited.stderr.contains("does not allow this node"), "\(waited.stderr)")
        try poll("a to list b as pending") { try a.ctl(["peers"]).stdout.contains(b.nodeID) }
    }
}
