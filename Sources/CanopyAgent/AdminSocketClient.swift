import CanopyAdmin
import CanopyCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A blocking client of the admin socket, for `canopyctl` and tests: send a request, read lines.
///
/// Not thread-safe: one thread at a time uses one client (it may be handed to another thread, as
/// `canopyctl sync --wait` hands its event connection to the progress-bar thread). Lines longer than `lineBytesMax` are refused (the
/// agent's responses are bounded by what it holds; `export` pages keep them moderate).
public final class AdminSocketClient: @unchecked Sendable {
    /// Why talking to the agent failed.
    public enum ClientError: Error, CustomStringConvertible {
        /// Nothing accepted the connection at `path`.
        case unreachable(path: String, detail: String)
        /// The agent closed the connection.
        case closed
        /// The agent sent something that is not a JSON object line.
        case badResponse(String)
        /// Nothing arrived within the client's receive timeout (a hung agent).
        case timedOut(seconds: Double)

        public var description: String {
            switch self {
            case .unreachable(let path, let detail): return "cannot reach the agent at \(path): \(detail)"
            case .closed: return "the agent closed the connection"
            case .badResponse(let detail): return "unexpected response from the agent: \(detail)"
            case .timedOut(let seconds): return "the agent sent nothing for \(seconds) s"
            }
        }
    }

    /// The longest line accepted from the agent.
    public static let lineBytesMax = 256 << 20

    private let fd: Int32
    private let receiveTimeoutSeconds: Double?
    private var buffer: [UInt8] = []
    private var nextID: Int64 = 1

    /// Connects to the admin socket at `path`. With `receiveTimeoutSeconds`, a read that waits
    /// longer than that for the agent fails with `timedOut` instead of blocking for ever (tests
    /// use it so that a hung agent fails the test rather than stalling the suite).
    public init(path: String, receiveTimeoutSeconds: Double? = nil) throws(ClientError) {
        do {
            fd = try Socket.connectUnix(path)
        } catch {
            if case .system(let system) = error {
                throw .unreachable(path: path, detail: String(cString: strerror(system.code)))
            }
            throw .unreachable(path: path, detail: error.description)
        }
        self.receiveTimeoutSeconds = receiveTimeoutSeconds
        if let seconds = receiveTimeoutSeconds {
            precondition(seconds > 0, "a receive timeout must be positive")
            var value = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - seconds.rounded(.down)) * 1_000_000))
            guard setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &value, socklen_t(MemoryLayout<timeval>.size)) == 0 else {
                let detail = String(cString: strerror(errno))
                close(fd)
                throw .unreachable(path: path, detail: "setting the receive timeout: \(detail)")
            }
        }
    }

    deinit { close(fd) }

    /// Ends the connection now (the agent sees it close); later calls fail with `closed`. The
    /// descriptor itself is released when the client is.
    public func disconnect() {
        shutdown(fd, Int32(SHUT_RDWR))
    }

    /// Sends `{"id":N,"cmd":command,…arguments}` and returns the matching response object,
    /// skipping any event or resolver lines that arrive first. An agent at its client limit
    /// answers `busy` (with a null `id`) and closes: that line is returned as the response, also
    /// when the close came before the request could be sent.
    public func request(_ command: String, _ arguments: [String: JSONValue] = [:]) throws(ClientError) -> [String: JSONValue] {
        let id = nextID
        nextID += 1
        do {
            try sendLine(AdminRequestLine(id: id, command: command, arguments: arguments).encoded())
        } catch {
            if let busy = try? readObject(), Self.isBusy(busy) { return busy }
            throw error
        }
        while true {
            let response = try readObject()
            if AdminResponseLine.responseID(of: response) == id || Self.isBusy(response) { return response }
        }
    }

    /// Sends `command` and reads its answer: the typed reply, or the agent's error (`busy` from
    /// an agent at its client limit included).
    public func call<C: AdminCommand>(_ command: C) throws(ClientError) -> Result<AdminAnswer<C>, AdminFailure> {
        AdminAnswer<C>.read(try request(C.name, AdminRequestLine.encodeArguments(command)))
    }

    /// `upload` of `attach`, typed: its `length` bytes come from `read`.
    public func upload(
        _ command: Admin.Attach, from read: (UnsafeMutableRawBufferPointer) -> Int
    ) throws(ClientError) -> Result<AdminAnswer<Admin.Attach>, AdminFailure> {
        var arguments = AdminRequestLine.encodeArguments(command)
        arguments["length"] = nil
        return AdminAnswer.read(try upload(Admin.Attach.name, arguments, length: command.length, from: read))
    }

    /// Sends an upload request (`attach`, Protocol/admin-v1.md §2): its line with `length`, then,
    /// once the agent says `upload`, `length` bytes that `read` puts into the buffer it is given
    /// (returning the count, 0 at the end, -1 on error with `errno` set), and returns the response.
    /// A refusal before the bytes is returned as the response, no byte sent. A source shorter than
    /// `length` ends the connection (the agent stores nothing) and fails with `badResponse`.
    public func upload(
        _ command: String, _ arguments: [String: JSONValue], length: Int64, from read: (UnsafeMutableRawBufferPointer) -> Int
    ) throws(ClientError) -> [String: JSONValue] {
        let id = nextID
        nextID += 1
        var members = arguments
        members["length"] = .int(length)
        try sendLine(AdminRequestLine(id: id, command: command, arguments: members).encoded())
        while true {
            let line = try readObject()
            if AdminResponseLine.responseID(of: line) == id || Self.isBusy(line) { return line }
            if AdminUploadGrant(line: line)?.id == id { break }
        }
        var chunk = [UInt8](repeating: 0, count: 1 << 20)
        var remaining = length
        while remaining > 0 {
            let wanted = Int(min(Int64(chunk.count), remaining))
            let count = chunk.withUnsafeMutableBytes { read(UnsafeMutableRawBufferPointer(rebasing: $0[..<wanted])) }
            guard count > 0 else {
                disconnect()
                throw .badResponse(count < 0
                    ? "reading the content failed: \(String(cString: strerror(errno))); nothing was stored"
                    : "the content ended \(remaining) bytes before its announced length; nothing was stored")
            }
            try sendAll(chunk[0..<count])
            remaining -= Int64(count)
        }
        while true {
            let response = try readObject()
            if AdminResponseLine.responseID(of: response) == id { return response }
        }
    }

    /// `download` of `attachment`, typed: the content goes to `write` when the answer is a success.
    public func download(
        _ command: Admin.GetAttachment, to write: (ArraySlice<UInt8>) throws -> Void
    ) throws -> Result<AdminAnswer<Admin.GetAttachment>, AdminFailure> {
        AdminAnswer.read(try download(Admin.GetAttachment.name, AdminRequestLine.encodeArguments(command), to: write))
    }

    /// Sends a download request (`attachment`) and returns its response; when it succeeded, the
    /// `length` bytes that follow it are handed to `write` a part at a time first. Fails with
    /// `closed` when the agent ends the connection before the last byte (it does so for content
    /// that is damaged on its disk).
    public func download(
        _ command: String, _ arguments: [String: JSONValue], to write: (ArraySlice<UInt8>) throws -> Void
    ) throws -> [String: JSONValue] {
        let response = try request(command, arguments)
        var remaining: Int64
        switch AdminResponseLine.reply(to: Admin.GetAttachment.self, from: response) {
        case .success(let header) where header.length >= 0: remaining = header.length
        case .success: throw ClientError.badResponse("a download response with a negative length")
        case .failure(let failure) where failure.code == .failed && AdminResponseLine.isSuccess(response):
            throw ClientError.badResponse("a download response without its content's description: \(failure.message)")
        case .failure: return response
        }
        var chunk = [UInt8](repeating: 0, count: 1 << 20)
        while remaining > 0 {
            if !buffer.isEmpty {
                let count = Int(min(Int64(buffer.count), remaining))
                try write(buffer[0..<count])
                buffer.removeSubrange(0..<count)
                remaining -= Int64(count)
                continue
            }
            let wanted = Int(min(Int64(chunk.count), remaining))
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, wanted, 0) }
            if count < 0 && errno == EINTR { continue }
            if count < 0, errno == EAGAIN || errno == EWOULDBLOCK, let seconds = receiveTimeoutSeconds {
                throw ClientError.timedOut(seconds: seconds)
            }
            guard count > 0 else { throw ClientError.closed }
            try write(chunk[0..<count])
            remaining -= Int64(count)
        }
        return response
    }

    /// True for the `busy` line an agent at its client limit sends before closing.
    public static func isBusy(_ response: [String: JSONValue]) -> Bool { AdminResponseLine.isBusy(response) }

    /// Sends raw bytes followed by a newline (tests use it to send malformed requests).
    public func sendLine(_ bytes: [UInt8]) throws(ClientError) {
        var data = bytes
        data.append(UInt8(ascii: "\n"))
        try sendAll(data[...])
    }

    /// Sends `bytes` as they are (an upload's content; tests send partial ones).
    public func sendAll(_ bytes: ArraySlice<UInt8>) throws(ClientError) {
        var offset = bytes.startIndex
        while offset < bytes.endIndex {
            let count = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { throw .closed }
            offset += count
        }
    }

    /// Reads the next line as a JSON object.
    public func readObject() throws(ClientError) -> [String: JSONValue] {
        let line = try readLine()
        guard let value = try? JSONValue.parse(line), case .object(let members) = value else {
            throw .badResponse(String(decoding: line.prefix(200), as: UTF8.self))
        }
        return members
    }

    /// Reads and drops whatever the agent sends until it closes the connection, or until
    /// `deadline` (seconds on CLOCK_MONOTONIC) passes. Returns whether the connection ended.
    @discardableResult
    public func waitUntilClosed(deadline: Double) -> Bool {
        buffer = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let remaining = deadline - AgentExitWait.monotonicSeconds()
            guard remaining > 0 else { return false }
            var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&entry, 1, Int32(min(remaining * 1000, 1000).rounded(.up)))
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else {
                if ready < 0 { return false }
                continue
            }
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if count < 0, errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK { continue }
            if count <= 0 { return true }
        }
    }

    /// Reads the next line (without its newline).
    public func readLine() throws(ClientError) -> [UInt8] {
        // Only bytes not searched yet are searched: a multi-megabyte line arrives in many reads.
        var searched = 0
        while true {
            if let newline = buffer[searched...].firstIndex(of: UInt8(ascii: "\n")) {
                let line = Array(buffer[..<newline])
                buffer.removeSubrange(...newline)
                return line
            }
            searched = buffer.count
            guard buffer.count <= Self.lineBytesMax else { throw .badResponse("line over \(Self.lineBytesMax) bytes") }
            var chunk = [UInt8](repeating: 0, count: 64 * 1024)
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count < 0 && errno == EINTR { continue }
            if count < 0, errno == EAGAIN || errno == EWOULDBLOCK, let seconds = receiveTimeoutSeconds {
                throw .timedOut(seconds: seconds)
            }
            guard count > 0 else { throw .closed }
            buffer.append(contentsOf: chunk[0..<count])
        }
    }
}
