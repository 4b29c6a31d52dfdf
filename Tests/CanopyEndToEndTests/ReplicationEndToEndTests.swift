import CanopyAgent
import CanopyCore
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("replication between real agents over encrypted TCP", .serialized)
struct ReplicationEndToEndTests {
    @Test("two agents that allow each other converge both ways, sync --wait returns when done, and stats counts the peer bytes")
    func twoAgentsConverge() throws {
        let (a, b) = try AgentProcess.peeredPair()
        try a.put("from-a", ["n": .int(1)])
        try b.put("from-b", ["n": .int(2)])
        try poll("from-a on b") { try b.value(of: "from-a", "n") == .int(1) }
        try poll("from-b on a") { try a.value(of: "from-b", "n") == .int(2) }
        let sync = try b.ctl(["sync", a.nodeID, "--wait"])
        #expect(sync.status == 0, "\(sync.stderr)")
        try poll("a to report b connected") {
            guard case .array(let peers)? = try a.client().request("status")["peers"] else { return false }
            return peers.first?.objectValue?["connected"] == .bool(true)
        }
        for agent in [a, b] {
            let stats = try agent.client().request("stats")
            guard case .int(let sent)? = stats["peer_bytes_sent"], case .int(let received)? = stats["peer_bytes_received"] else {
                Issue.record("stats has no peer byte counters: \(stats)")
                continue
            }
            #expect(sent > 0 && received > 0, "peer traffic counted both ways")
        }
    }

    @Test("three agents in a line converge: a write on one end reaches the other end")
    func lineConverges() throws {
        let a = try AgentProcess()
        let b = try AgentProcess()
        let c = try AgentProcess()
        for agent in [a, b, c] { try agent.start() }
        try a.allow(b)
        try b.allow(a)
        try b.allow(c)
        try c.allow(b)
        try a.put("travels", ["hops": .int(2)])
        try poll("a's write on c") { try c.value(of: "travels", "hops") == .int(2) }
        try c.put("back", ["hops": .int(2)])
        try poll("c's write on a") { try a.value(of: "back", "hops") == .int(2) }
    }

    @Test("an unknown peer is refused after the handshake, listed as pending, and replicates once accepted")
    func unknownPeerIsPendingUntilAccepted() throws {
        let a = try AgentProcess()
        let b = try AgentProcess()
        try a.start()
        try b.start()
        try b.allow(a)  // b dials a, but a does not know b
        try poll("b to be pending on a") {
            guard case .array(let pending)? = try a.client().request("peers")["pending"] else { return false }
            return pending.contains { $0.objectValue?["node_id"] == .string(b.nodeID) }
        }
        try b.put("after-accept", ["ok": .bool(true)])
        #expect(try a.value(of: "after-accept", "ok") == nil)
        // The table says where b connected from, not a dial address, and suggests accepting b
        // without one (b dials a; a need not dial b).
        let table = try a.ctl(["peers"])
        #expect(table.stdout.contains("CONNECTED FROM"), "\(table.stdout)")
        #expect(table.stdout.contains("`canopyctl peer accept NODEID`"), "\(table.stdout)")
        let accepted = try a.ctl(["peer", "accept", b.nodeID])
        #expect(accepted.status == 0, "\(accepted.stderr)")
        try poll("b's document on a after accepting b") { try a.value(of: "after-accept", "ok") == .bool(true) }
        let config = try String(contentsOfFile: a.dataDir + "/canopy.conf", encoding: .utf8)
        #expect(config.contains("[peer \(b.nodeID)]\naddress = -"), "\(config)")
    }

    @Test("a peer written into the config file and applied with SIGHUP replicates without a restart")
    func sighupAddsPeer() throws {
        let a = try AgentProcess()
        let b = try AgentProcess()
        try a.start()
        try b.start()
        try b.allow(a)
        try b.put("via-sighup", ["n": .int(7)])
        let configPath = a.dataDir + "/canopy.conf"
        let text = try String(contentsOfFile: configPath, encoding: .utf8)
        let section = "\n[peer \(b.nodeID)]\naddress = \(try b.listenAddress())\n"
        try (text + section).write(toFile: configPath, atomically: true, encoding: .utf8)
        a.signal(SIGHUP)
        try poll("b's document on a after the reload") { try a.value(of: "via-sighup", "n") == .int(7) }
    }

    @Test("garbage and an oversized length prefix on the peer port are refused while the agent keeps serving its peers")
    func garbageIsRefused() throws {
        let (a, b) = try AgentProcess.peeredPair()
        try a.put("before", [:])
        try poll("before on b") { try b.client().request("get", ["doc": .string("before")])["ok"] == .bool(true) }
        let address = try a.listenAddress()
        for payload in [[UInt8](repeating: 0xFF, count: 200), [0x7F, 0xFF, 0xFF, 0xFF] + [UInt8](repeating: 0, count: 72)] {
            #expect(try rawExchange(address, payload).isEmpty)  // closed without a reply
        }
        try a.put("after", ["still": .bool(true)])
        try poll("after on b") { try b.value(of: "after", "still") == .bool(true) }
    }
}

/// Connects to `HOST:PORT`, sends `bytes`, and returns what comes back before the agent closes
/// the connection (bounded by a receive timeout, so a hanging agent fails the test).
private func rawExchange(_ address: String, _ bytes: [UInt8]) throws -> [UInt8] {
    guard let target = HostPort(parsing: address) else { throw TimedOut(what: "a parsable address") }
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var sin = sockaddr_in()
    sin.sin_family = sa_family_t(AF_INET)
    sin.sin_port = target.port.bigEndian
    inet_pton(AF_INET, target.host, &sin.sin_addr)
    let connected = withUnsafePointer(to: &sin) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard connected == 0 else { throw TimedOut(what: "a TCP connection to \(address)") }
    var timeout = timeval(tv_sec: Int(waitLimitSeconds), tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    var received: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if count == 0 { return received }
        if count < 0 {
            if errno == ECONNRESET { return received }
            throw TimedOut(what: "the agent to close the connection (errno \(errno))")
        }
        received += buffer[0..<count]
    }
}
