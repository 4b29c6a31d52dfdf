import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A Unix datagram socket standing in for systemd's notification socket.
private final class NotifySocket {
    let path: String
    private let fd: Int32

    init(path: String) {
        self.path = path
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8) + [0]) }
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    /// The next datagram (waits at most 30 s, then returns "").
    func next() -> String {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        return count > 0 ? String(decoding: buffer[0..<count], as: UTF8.self) : ""
    }

    deinit { close(fd) }
}

@Suite("sd_notify", .serialized)
struct SystemdNotifyTests {
    @Test("the agent sends READY=1 when serving, RELOADING=1 then READY=1 on SIGHUP, STOPPING=1 on SIGTERM")
    func notifications() throws {
        let agent = try AgentProcess()
        let notify = NotifySocket(path: agent.temporary.path + "/notify.sock")
        agent.process.environment = ["NOTIFY_SOCKET": notify.path]
        try agent.start()
        #expect(notify.next().hasPrefix("READY=1"))
        agent.signal(SIGHUP)
        #expect(notify.next() == "RELOADING=1")
        #expect(notify.next().hasPrefix("READY=1"))
        agent.signal(SIGTERM)
        #expect(notify.next() == "STOPPING=1")
        try waitForExit(agent.process)
        #expect(agent.process.terminationStatus == 0)
    }
}
