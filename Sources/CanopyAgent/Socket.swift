#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Thin wrappers over the socket system calls the agent needs. Every function returns a file
/// descriptor it owns to the caller or throws; none leaks a descriptor on a failure path.
enum Socket {
    /// Sets O_NONBLOCK (Dispatch sources only tell us a call will not block; the call must not).
    static func setNonBlocking(_ fd: Int32) throws(SystemError) {
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else { throw SystemError("set O_NONBLOCK") }
    }

    /// Fills a `sockaddr_un` for `path`, or throws if it does not fit in `sun_path`.
    static func unixAddress(_ path: String) throws(AgentError) -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < AgentLimits.unixPathBytesMax else { throw .socketPathTooLong(path: path) }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return address
    }

    /// Connects a blocking Unix stream socket to `path` (used by `canopyctl` and the stale check).
    static func connectUnix(_ path: String) throws(AgentError) -> Int32 {
        var address = try unixAddress(path)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .system(SystemError("socket")) }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else {
            let error = SystemError("connect", path)
            close(fd)
            throw .system(error)
        }
        return fd
    }

    /// Listens on a Unix stream socket at `path` with mode 0600.
    ///
    /// A socket file already there is probed with connect(2): if an agent answers, it is live and
    /// is never stolen (`adminSocketInUse`); if the connect is refused, the file was left by a
    /// killed agent and is replaced. The caller holds the data directory lock, so no second agent
    /// can race between the probe and the unlink. The umask is narrowed around bind(2) so the
    /// socket is never reachable with wider permissions, then chmod makes 0600 explicit.
    static func listenUnix(_ path: String) throws(AgentError) -> Int32 {
        var address = try unixAddress(path)
        if access(path, F_OK) == 0 {
            if let probe = try? connectUnix(path) {
                close(probe)
                throw .adminSocketInUse(path: path)
            }
            guard unlink(path) == 0 || errno == ENOENT else { throw .system(SystemError("remove stale socket", path)) }
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .system(SystemError("socket")) }
        let previousMask = umask(0o177)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        umask(previousMask)
        guard bound == 0 else {
            let error = SystemError("bind", path)
            close(fd)
            throw .system(error)
        }
        guard chmod(path, 0o600) == 0, listen(fd, Int32(AgentLimits.adminConnectionsMax)) == 0 else {
            let error = SystemError("listen", path)
            close(fd)
            unlink(path)
            throw .system(error)
        }
        do throws(SystemError) { try setNonBlocking(fd) } catch { close(fd); throw .system(error) }
        return fd
    }

    /// The uid of the process at the other end of a connected Unix socket (SO_PEERCRED: the
    /// credentials in effect when it called connect(2)).
    static func peerUID(_ fd: Int32) -> uid_t? {
        var credentials = PeerCredentials()
        var length = socklen_t(MemoryLayout<PeerCredentials>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0,
            length == socklen_t(MemoryLayout<PeerCredentials>.size)
        else { return nil }
        return credentials.uid
    }

    /// Linux's `struct ucred` (socket(7)), which Glibc's Swift module hides behind _GNU_SOURCE:
    /// three 32-bit fields, pid, uid, gid.
    private struct PeerCredentials {
        var pid: Int32 = 0
        var uid: uid_t = 0
        var gid: gid_t = 0
    }

    /// Accepts one connection as a non-blocking, close-on-exec descriptor; nil when none is ready.
    static func accept(_ listener: Int32) -> Int32? {
        // accept4 is not visible to Swift's Glibc module; the descriptor is not shared with any
        // other thread before the flags are set, so two calls are as good as one here.
        let fd = Glibc.accept(listener, nil, nil)
        guard fd >= 0 else { return nil }
        guard fcntl(fd, F_SETFD, FD_CLOEXEC) == 0, (try? setNonBlocking(fd)) != nil else {
            close(fd)
            return nil
        }
        return fd
    }

    /// Turns off Nagle's algorithm on a peer TCP socket. The replication exchange is a chain of
    /// small request/response messages; with Nagle on, a small frame written while an earlier one
    /// is unacknowledged waits for the peer's delayed ACK (about 40 ms on Linux), which set the
    /// continuous-replication latency. Best effort: a failure only costs latency.
    static func setNoDelay(_ fd: Int32) {
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Resolves a host and port to socket addresses (numeric or by name), TCP only.
    static func resolve(_ address: HostPort, passive: Bool) throws(AgentError) -> [(family: Int32, storage: sockaddr_storage, length: socklen_t)] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = passive ? AI_PASSIVE : 0
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(address.host, String(address.port), &hints, &list)
        guard status == 0, let first = list else {
            throw .badAddress("cannot resolve \(address): \(String(cString: gai_strerror(status)))")
        }
        defer { freeaddrinfo(list) }
        var results: [(Int32, sockaddr_storage, socklen_t)] = []
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let entry = cursor {
            var storage = sockaddr_storage()
            withUnsafeMutableBytes(of: &storage) { raw in
                raw.copyMemory(from: UnsafeRawBufferPointer(start: entry.pointee.ai_addr, count: Int(entry.pointee.ai_addrlen)))
            }
            results.append((entry.pointee.ai_family, storage, entry.pointee.ai_addrlen))
            cursor = entry.pointee.ai_next
        }
        return results.map { (family: $0.0, storage: $0.1, length: $0.2) }
    }

    /// Listens on TCP at `address` (non-blocking, SO_REUSEADDR); returns the descriptor and the
    /// port actually bound, which differs from the requested one when that was 0.
    static func listenTCP(_ address: HostPort) throws(AgentError) -> (fd: Int32, port: UInt16) {
        guard let target = try resolve(address, passive: true).first else { throw .badAddress("no address for \(address)") }
        let fd = socket(target.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .system(SystemError("socket")) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var storage = target.storage
        let bound = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, target.length) }
        }
        guard bound == 0, listen(fd, Int32(AgentLimits.tcpListenBacklog)) == 0 else {
            let error = SystemError("listen on", address.description)
            close(fd)
            throw .system(error)
        }
        do throws(SystemError) { try setNonBlocking(fd) } catch { close(fd); throw .system(error) }
        return (fd, localPort(fd) ?? address.port)
    }

    /// The local port a TCP socket is bound to.
    static func localPort(_ fd: Int32) -> UInt16? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let status = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard status == 0 else { return nil }
        return port(of: storage)
    }

    /// `HOST:PORT` of the remote end of a TCP socket, for logs and pending-peer records.
    static func remoteAddress(_ fd: Int32) -> String {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let status = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &length) }
        }
        guard status == 0 else { return "?" }
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        let named = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                getnameinfo($0, length, &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST)
            }
        }
        guard named == 0 else { return "?" }
        let hostText = String(decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return HostPort(host: hostText, port: port(of: storage) ?? 0).description
    }

    private static func port(of storage: sockaddr_storage) -> UInt16? {
        var copy = storage
        switch Int32(storage.ss_family) {
        case AF_INET:
            return withUnsafePointer(to: &copy) { $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) } }
        case AF_INET6:
            return withUnsafePointer(to: &copy) { $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) } }
        default:
            return nil
        }
    }
}
