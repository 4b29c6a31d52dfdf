#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// sd_notify without libsystemd: one datagram per state change to the Unix datagram socket named
/// by `$NOTIFY_SOCKET` (a path, or an abstract-namespace name when it starts with '@').
/// Without the variable (not started by systemd with `Type=notify`) every call does nothing.
package struct SystemdNotifier: Sendable {
    private let socketPath: String?

    /// Reads `$NOTIFY_SOCKET` from `environment`.
    public init(environment: [String: String]) {
        let path = environment["NOTIFY_SOCKET"] ?? ""
        socketPath = path.isEmpty ? nil : path
    }

    /// `READY=1`: startup finished (after a reload, also ends `RELOADING=1`).
    public func ready(status: String? = nil) { send(["READY=1"] + (status.map { ["STATUS=\($0)"] } ?? [])) }
    /// `RELOADING=1`: a config reload started; `ready()` must follow.
    public func reloading() { send(["RELOADING=1"]) }
    /// `STOPPING=1`: shutdown started.
    public func stopping() { send(["STOPPING=1"]) }

    /// Sends newline-separated assignments. Failures are ignored: notification is advisory, and
    /// systemd's start timeout reports a daemon that never became ready.
    func send(_ assignments: [String]) {
        guard let socketPath else { return }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var pathBytes = Array(socketPath.utf8)
        let abstract = pathBytes.first == UInt8(ascii: "@")
        if abstract { pathBytes[0] = 0 }
        guard pathBytes.count < AgentLimits.unixPathBytesMax else { return }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: pathBytes) }
        // An abstract name's length is exact (no terminating NUL); a path's includes the NUL.
        let length = MemoryLayout<sa_family_t>.size + pathBytes.count + (abstract ? 0 : 1)
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let message = Array(assignments.joined(separator: "\n").utf8)
        _ = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { addressPointer in
                message.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), addressPointer, socklen_t(length)) }
            }
        }
    }
}
