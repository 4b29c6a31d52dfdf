import CanopyAgent
import CanopyCore
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Silent connections from one address hold at most their share of the handshake slots.
@Suite("handshake slots under a silent-connection flood, with real processes", .serialized)
struct HandshakeFairnessEndToEndTests {
    /// A TCP connection to `port` on 127.0.0.1 from the loopback address `source` (another
    /// address of 127.0.0.0/8, so the agent sees a different source than its peers'); -1 when it
    /// cannot be made.
    static func connect(from source: String, toPort port: UInt16) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return -1 }
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        inet_pton(AF_INET, source, &local.sin_addr)
        var remote = sockaddr_in()
        remote.sin_family = sa_family_t(AF_INET)
        remote.sin_port = port.bigEndian
        inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr)
        let bound = withUnsafePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        let connected = withUnsafePointer(to: &remote) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, connected == 0 else {
            close(fd)
            return -1
        }
        return fd
    }

    @Test("an allowed peer gets in while another address holds 60 silent connections, without waiting for them to time out")
    func allowedPeerGetsIn() throws {
        let a = try AgentProcess()
        let b = try AgentProcess()
        try a.start()
        try b.start()
        let address = try a.listenAddress()
        let port = try #require(UInt16(address.split(separator: ":").last ?? ""))
        // More silent connections than there are slots; they say nothing until the agent drops them.
        var silent: [Int32] = []
        defer { silent.forEach { close($0) } }
        for _ in 0..<60 {
            let fd = Self.connect(from: "127.0.0.2", toPort: port)
            if fd >= 0 { silent.append(fd) }
        }
        #expect(silent.count == 60)
        // Only b dials: a accepts it, so b's way in is a's port, where the silent ones wait.
        let accepted = try a.ctl(["peer", "add", b.nodeID, "-"])
        #expect(accepted.status == 0, "\(accepted.stderr)")
        try b.allow(a)
        try b.put("through", ["n": .int(1)])
        try poll("b's document on a") { try a.value(of: "through", "n") == .int(1) }
        // b got in while silent connections still held their slots: the agent made room by
        // dropping that address's oldest ones, not by waiting for every one to time out (without
        // fair slots, b's document arrives only after all of them were dropped).
        let open = silent.filter(Self.isOpen)
        #expect(!open.isEmpty && open.count <= AgentLimits.pendingInboundPerSourceMax, "\(open.count) silent connections still open")
    }

    /// True when the agent has not closed the connection (nothing to read, no end of stream).
    static func isOpen(_ fd: Int32) -> Bool {
        var byte: UInt8 = 0
        let count = recv(fd, &byte, 1, Int32(MSG_DONTWAIT | MSG_PEEK))
        return count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
    }
}
