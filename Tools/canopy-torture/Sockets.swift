import CanopyAdmin
import CanopyAgent
import CanopyCore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Raw sockets for attackers: they must do what no well-behaved client does (say nothing, never
/// read), so they do not use `AdminSocketClient`.
enum RawSocket {
    /// A non-blocking TCP connection being made from `source` to 127.0.0.1:`port`; -1 on failure.
    static func tcp(from source: String, toPort port: UInt16) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return -1 }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        inet_pton(AF_INET, source, &local.sin_addr)
        var remote = sockaddr_in()
        remote.sin_family = sa_family_t(AF_INET)
        remote.sin_port = port.bigEndian
        inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr)
        let size = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, size) } }
        let connected = withUnsafePointer(to: &remote) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, size) }
        }
        guard bound == 0, connected == 0 || errno == EINPROGRESS else {
            close(fd)
            return -1
        }
        return fd
    }

    /// A blocking connection to the Unix socket at `path`; -1 on failure.
    static func unix(_ path: String) -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return -1 }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.prefix(raw.count - 1).enumerated() { raw[index] = byte }
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            return -1
        }
        return fd
    }

    /// Sends all of `text` (blocking); false when the peer closed.
    @discardableResult
    static func send(_ fd: Int32, _ text: String) -> Bool {
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent < 0 && errno == EINTR { continue }
            guard sent > 0 else { return false }
            offset += sent
        }
        return true
    }

    /// Reads whatever is there without waiting: `.closed` when the peer has closed (or reset) the
    /// connection, otherwise how many bytes were drained.
    enum Drained { case open(Int), closed }

    static func drain(_ fd: Int32) -> Drained {
        var total = 0
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if count > 0 {
                total += count
                continue
            }
            if count < 0 && errno == EINTR { continue }
            if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return .open(total) }
            return .closed
        }
    }
}

/// Silent TCP connections to an agent's peer port, from one source address: each says nothing,
/// and each one the agent closes is opened again at once, until `stop`.
final class SilentFlood: BackgroundLoop, @unchecked Sendable {
    private let source: String
    private let port: UInt16
    private let count: Int
    /// Connections the agent closed (each was opened again).
    let closedByAgent = LockedCounter()
    /// Connections that could not be opened at all (retried).
    let failedOpens = LockedCounter()

    init(source: String, port: UInt16, count: Int) {
        self.source = source
        self.port = port
        self.count = count
    }

    override func run() {
        var fds = [Int32](repeating: -1, count: count)
        defer { fds.filter { $0 >= 0 }.forEach { close($0) } }
        while !stopping {
            var opened = false
            for index in fds.indices where fds[index] < 0 {
                fds[index] = RawSocket.tcp(from: source, toPort: port)
                if fds[index] < 0 { failedOpens.add() } else { opened = true }
            }
            var entries = fds.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            let ready = poll(&entries, nfds_t(entries.count), 50)
            if ready > 0 {
                for (index, entry) in entries.enumerated() where entry.revents != 0 && entry.fd >= 0 {
                    if case .closed = RawSocket.drain(entry.fd) {
                        close(entry.fd)
                        fds[index] = -1
                        closedByAgent.add()
                    }
                }
            }
            // Nothing could be opened (the agent is not listening): do not spin.
            if !opened && fds.contains(-1) { pause(0.01) }
        }
    }
}

/// Samples a process's resident memory (VmRSS) every 20 ms until stopped.
final class RSSSampler: BackgroundLoop, @unchecked Sendable {
    private let lock = NSLock()
    private var peak = 0
    private let pid: Int32

    /// Starts sampling at once.
    init(pid: Int32) {
        self.pid = pid
        super.init()
        start()
    }

    override func run() {
        while !stopping {
            let sample = TortureAgent.residentBytes(pid)
            lock.withLock { peak = max(peak, sample) }
            pause(0.02)
        }
    }

    /// Stops sampling; returns the peak in bytes.
    func peakBytes() -> Int {
        stop()
        return lock.withLock { peak }
    }
}

/// User + system CPU seconds of process `pid` so far (/proc/PID/stat fields 14 and 15).
func cpuSeconds(pid: Int32) -> Double {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = stat.lastIndex(of: ")")
    else { return 0 }
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// The data of an event about one peer, which names it.
protocol PeerEventData: AdminEventData {
    var nodeID: String { get }
}

extension Admin.PeerConnected: PeerEventData {}
extension Admin.PeerDisconnected: PeerEventData {}

/// An agent's event stream read on a thread of its own: each event and its arrival time.
final class EventWatcher: @unchecked Sendable {
    struct Seen {
        var event: Admin.Event
        var at: Double
    }

    private let lock = NSLock()
    private var seen: [Seen] = []
    private let client: AdminSocketClient

    init(_ agent: TortureAgent) throws {
        client = try agent.client(timeout: 3600)
        try agent.call(Admin.Subscribe(), on: client)
        Thread { [self] in
            while let line = try? client.readLine() {
                guard case .event(let event)? = try? AdminLine.read(line) else { continue }
                let entry = Seen(event: event, at: now())
                lock.withLock { seen.append(entry) }
            }
        }.start()
    }

    /// Waits until an event of type `D` about `nodeID` arrives after `after`; its arrival time, or nil after `limit` seconds.
    func wait<D: PeerEventData>(for type: D.Type, nodeID: String, after: Double, limit: Double) -> Double? {
        let key = EventWatcher.normalized(nodeID)
        var found: Double?
        _ = waitUntil(limit: limit, interval: 0.001) {
            found = lock.withLock {
                seen.first { $0.at >= after && $0.event.data(as: D.self).map { EventWatcher.normalized($0.nodeID) } == key }?.at
            }
            return found != nil
        }
        return found
    }

    static func normalized(_ text: String) -> String { text.uppercased().filter { $0 != "-" && $0 != " " } }
}
