import Glibc

/// A blocking TCP connection over 127.0.0.1, made with plain POSIX calls, for tests that must
/// run the protocol over a real kernel socket.
struct LoopbackSocket {
    let fd: Int32

    /// A connected (client, server) pair through a listening socket on an ephemeral port.
    static func pair() -> (client: LoopbackSocket, server: LoopbackSocket) {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        precondition(listener >= 0, "socket failed: \(errno)")
        defer { _ = Glibc.close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                precondition(bind(listener, $0, length) == 0, "bind failed: \(errno)")
                precondition(listen(listener, 1) == 0, "listen failed: \(errno)")
                precondition(getsockname(listener, $0, &length) == 0, "getsockname failed: \(errno)")
            }
        }
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                precondition(connect(client, $0, length) == 0, "connect failed: \(errno)")
            }
        }
        let server = accept(listener, nil, nil)
        precondition(server >= 0, "accept failed: \(errno)")
        for fd in [client, server] {
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        }
        return (LoopbackSocket(fd: client), LoopbackSocket(fd: server))
    }

    /// Writes every byte (blocking).
    func write(_ bytes: [UInt8]) {
        var written = 0
        while written < bytes.count {
            let count = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, $0.count - written) }
            precondition(count > 0 || errno == EINTR, "write failed: \(errno)")
            if count > 0 { written += count }
        }
    }

    /// Reads what is available (blocking until at least one byte); empty at EOF.
    func read(upTo count: Int = 65536) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: count)
        while true {
            let got = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress!, $0.count) }
            if got < 0 && errno == EINTR { continue }
            precondition(got >= 0, "read failed: \(errno)")
            return Array(buffer[0..<got])
        }
    }

    /// Half-closes the write side so the peer reads EOF.
    func shutdownWrite() { shutdown(fd, Int32(SHUT_WR)) }

    func close() { _ = Glibc.close(fd) }
}
