import Foundation
import Testing

@testable import CanopyAgent

#if canImport(Glibc)
import Glibc
#endif

@Suite("system interfaces the agent relies on")
struct SystemInterfaceTests {
    @Test("SO_PEERCRED reports this process's uid for the other end of a Unix socket pair")
    func peerCredentials() throws {
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        defer { fds.forEach { close($0) } }
        #expect(Socket.peerUID(fds[0]) == getuid())
        #expect(Socket.peerUID(-1) == nil)
    }

    @Test("sd_notify reaches an abstract-namespace socket named with '@'", arguments: [true, false])
    func notifyReachesSocket(abstract: Bool) throws {
        let name = "canopy-test-\(getpid())-\(abstract)"
        let path = abstract ? "@" + name : NSTemporaryDirectory() + name
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        defer {
            close(fd)
            if !abstract { unlink(path) }
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(path.utf8)
        if abstract { bytes[0] = 0 }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (abstract ? 0 : 1))
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        #expect(bound == 0)
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))

        SystemdNotifier(environment: ["NOTIFY_SOCKET": path]).ready(status: "serving")
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        #expect(count > 0)
        #expect(String(decoding: buffer[0..<max(count, 0)], as: UTF8.self) == "READY=1\nSTATUS=serving")
    }
    @Test("an admin client with a receive timeout fails with timedOut when the agent never answers")
    func adminClientTimesOut() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("canopy-timeout-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("admin.sock").path
        // A listener that accepts (the kernel completes the connection) and never reads or writes.
        let listener = try Socket.listenUnix(path)
        defer { close(listener) }
        let client = try AdminSocketClient(path: path, receiveTimeoutSeconds: 0.2)
        #expect {
            _ = try client.request("status")
        } throws: { error in
            guard case AdminSocketClient.ClientError.timedOut(let seconds) = error else { return false }
            return seconds == 0.2
        }
    }
}
