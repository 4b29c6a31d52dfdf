import CanopyCore
import DequeModule
import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Carries out admin requests. The agent implements it; the server only frames and validates.
protocol AdminRequestHandler: AnyObject, Sendable {
    /// Handles one request and calls `reply` exactly once, from any queue. `client` lets
    /// streaming commands (`events`, `resolver`) keep sending after the reply.
    func handle(_ request: AdminRequest, client: AdminClient, reply: @escaping @Sendable (Result<[String: JSONValue], AdminFailure>) -> Void)
}

/// The listening admin socket: accepts connections, checks each peer's uid with SO_PEERCRED, and
/// hands them to `AdminClient`s.
///
/// Invariants: state is touched only on `queue`; at most `AgentLimits.adminConnectionsMax`
/// clients are open (one more is told `busy` and closed); the bytes queued for all clients
/// together stay within `AgentLimits.adminPendingWriteBytesTotalMax` (`writeBudget`); the socket file is removed by `stop()` (and only by it: a file we did not
/// create is never unlinked).
final class AdminServer: @unchecked Sendable {
    let path: String
    private let queue = DispatchQueue(label: "canopy.admin.server")
    private let listener: Int32
    private let allowedUID: uid_t
    /// Lines any local client can cause again and again (refusals, over-long lines, cut-offs).
    private let clientLog: RateLimitedLog
    private let writeBudget: PendingWriteBudget
    private weak var handler: (any AdminRequestHandler)?
    private var acceptSource: (any DispatchSourceRead)?
    private var clients: [ObjectIdentifier: AdminClient] = [:]
    private var stopped = false

    /// Binds the socket at `path` (stale-socket check included, see `Socket.listenUnix`).
    init(path: String, handler: any AdminRequestHandler, logger: Logger) throws(AgentError) {
        self.path = path
        self.listener = try Socket.listenUnix(path)
        self.allowedUID = getuid()
        self.handler = handler
        let clientLog = RateLimitedLog(logger: logger)
        self.clientLog = clientLog
        writeBudget = PendingWriteBudget(totalMax: AgentLimits.adminPendingWriteBytesTotalMax) { bytes in
            clientLog.log(
                .warning, kind: "admin.write_budget",
                "admin client cut off: \(bytes) bytes queued for it, and all clients together hold over \(AgentLimits.adminPendingWriteBytesTotalMax) bytes")
        }
    }

    /// Starts accepting.
    func start() {
        queue.async { [self] in
            let source = DispatchSource.makeReadSource(fileDescriptor: listener, queue: queue)
            let fd = listener
            source.setEventHandler { [weak self] in self?.acceptReady() }
            source.setCancelHandler { close(fd) }
            acceptSource = source
            source.resume()
        }
    }

    /// Stops accepting, closes every client and removes the socket file. Synchronous, so a
    /// shutdown that returns has removed the socket.
    func stop() {
        queue.sync {
            guard !stopped else { return }
            stopped = true
            acceptSource?.cancel()
            acceptSource = nil
            unlink(path)
            for client in clients.values { client.closeFromServer() }
            clients = [:]
        }
        clientLog.reportSuppressed()
    }

    /// Number of clients connected (for `stats`).
    var clientCount: Int { queue.sync { clients.count } }

    private func acceptReady() {
        dispatchPrecondition(condition: .onQueue(queue))
        while let fd = Socket.accept(listener) {
            guard Socket.peerUID(fd) == allowedUID else {
                clientLog.log(.warning, kind: "admin.refused.uid", "admin connection refused: peer uid is not \(allowedUID)")
                close(fd)
                continue
            }
            guard clients.count < AgentLimits.adminConnectionsMax, let handler else {
                clientLog.log(.warning, kind: "admin.refused.busy", "admin connection refused: \(AgentLimits.adminConnectionsMax) clients already connected")
                Self.refuseBusy(fd)
                continue
            }
            let client = AdminClient(fd: fd, handler: handler, log: clientLog, writeBudget: writeBudget)
            let key = ObjectIdentifier(client)
            clients[key] = client
            client.start { [weak self] in
                guard let self else { return }
                self.queue.async { self.clients[key] = nil }
            }
        }
    }

    /// The one line a client over the connection limit gets before the close, so that it can
    /// say "busy" rather than "closed".
    static let busyLine = AdminResponse.failure(
        id: nil, AdminFailure(.busy, "the agent already serves \(AgentLimits.adminConnectionsMax) admin clients; try again"))

    /// Writes `busyLine` without blocking (it fits any socket buffer; if it does not go out the
    /// client is no worse off than with a bare close), then closes. What the client already sent
    /// is read first: closing a Unix socket with unread bytes resets the peer, which could lose
    /// the line.
    private static func refuseBusy(_ fd: Int32) {
        _ = busyLine.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
        var scratch = [UInt8](repeating: 0, count: 4096)
        for _ in 0..<16 {
            let count = scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            guard count > 0 else { break }
        }
        close(fd)
    }
}

/// One admin connection: splits the byte stream into lines, decodes each as a request, and writes
/// exactly one response per request, in request order. When the client ends its stream (a
/// half-close, as `nc -N` or `socat` do after their input), a last line without its newline counts
/// as a request, every request read is answered, and then the connection closes, unless it holds
/// an `events` stream, which goes on until the client closes or the agent stops.
///
/// Invariants (all on `queue`): responses leave in the order requests arrived (each request has a
/// slot in `responses`, sent once it and every slot before it are filled); one request is handled
/// at a time (the next line waits in `lines`), except that consecutive `resolver.answer` requests
/// are handled together, so a resolver that pipelines its answers has them written in one
/// transaction rather than one commit each; `buffer` never holds more than
/// `AgentLimits.adminLineBytesMax` bytes without a newline: the line-too-long error is sent and the
/// connection closed instead.
final class AdminClient: @unchecked Sendable {
    let queue = DispatchQueue(label: "canopy.admin.client")
    private let connection: StreamConnection
    private weak var handler: (any AdminRequestHandler)?
    private let log: RateLimitedLog
    private let writeBudget: PendingWriteBudget
    private var buffer: [UInt8] = []
    private var lines: [[UInt8]] = []
    /// Requests handed to the handler and not answered yet.
    private var inFlight = 0
    /// Every request in flight may run beside another of its kind (`pipelines`).
    private var inFlightPipelines = true
    /// The responses of the requests in flight and of lines refused meanwhile, in request order;
    /// nil until the response is known.
    private var responses: Deque<[UInt8]?> = []
    /// The position in the request order of `responses.first`.
    private var responsesBase = 0
    private var busy: Bool { inFlight > 0 }
    /// The first of `lines`, already decoded while the request before it ran: decoding a
    /// multi-megabyte `import` line then overlaps the store's write of the previous one. At most
    /// one line is decoded ahead, so a client that pipelines many lines holds them as bytes.
    private var decodedAhead: Result<AdminRequest, AdminDecodeFailure>?
    private var closeHandlers: [@Sendable () -> Void] = []
    private var isClosed = false
    /// The client has ended its stream: no more requests will come.
    private var inputEnded = false
    /// The connection stays open after the client's input ends (it streams events).
    private var staysOpen = false

    init(fd: Int32, handler: any AdminRequestHandler, log: RateLimitedLog, writeBudget: PendingWriteBudget) {
        self.connection = StreamConnection(
            fd: fd, queue: queue, pendingWriteBytesMax: AgentLimits.adminPendingWriteBytesMax, writeBudget: writeBudget)
        self.handler = handler
        self.log = log
        self.writeBudget = writeBudget
    }

    func start(onClose: @escaping @Sendable () -> Void) {
        queue.async { [self] in
            closeHandlers.append(onClose)
            connection.start(
                onRead: { [weak self] in self?.received($0) }, onClose: { [weak self] in self?.closed() },
                onEnd: { [weak self] in self?.endOfInput() })
        }
    }

    /// Sends a line that is not a response (a streamed event or a resolver question). The line
    /// counts against the write budget from now on, not only once this client's queue has run.
    func sendLine(_ value: JSONValue) {
        sendLine(encoded: AdminResponse.line(value))
    }

    /// Queues a line already encoded (`AdminResponse.line`), as an event sent to every subscriber.
    func sendLine(encoded bytes: [UInt8]) {
        let owner = ObjectIdentifier(connection)
        let cutOff: @Sendable () -> Void = { [weak self] in self?.queue.async { [weak self] in self?.connection.close() } }
        writeBudget.addInFlight(owner, bytes.count, streaming: true, cutOff: cutOff)
        queue.async { [self] in
            writeBudget.addInFlight(owner, -bytes.count, streaming: true, cutOff: cutOff)
            connection.send(bytes)
        }
    }

    /// Registers a handler run once when the connection closes (immediately if already closed).
    func onClose(_ handler: @escaping @Sendable () -> Void) {
        queue.async { [self] in
            if isClosed { handler() } else { closeHandlers.append(handler) }
        }
    }

    /// Keeps the connection open after the client ends its input (an `events` subscription).
    /// Called before the request's reply, so it takes effect before that reply is sent.
    func staysOpenAfterInput() {
        queue.async { [self] in
            staysOpen = true
            connection.isStream = true
        }
    }

    /// Closes from the server side (agent shutdown).
    func closeFromServer() {
        queue.async { [self] in connection.closeWhenFlushed() }
    }

    private func received(_ bytes: ArraySlice<UInt8>) {
        dispatchPrecondition(condition: .onQueue(queue))
        var start = bytes.startIndex
        // `firstIndex(of:)` on the contiguous slice (memchr-fast), not a loop over every byte:
        // an import sends megabytes per line.
        while let index = bytes[start...].firstIndex(of: UInt8(ascii: "\n")) {
            buffer.append(contentsOf: bytes[start..<index])
            start = index + 1
            guard buffer.count <= AgentLimits.adminLineBytesMax else { return lineTooLong() }
            takeBufferedLine()
        }
        buffer.append(contentsOf: bytes[start...])
        guard buffer.count <= AgentLimits.adminLineBytesMax else { return lineTooLong() }
        handleNext()
    }

    private func lineTooLong() {
        log.log(.warning, kind: "admin.line_too_long", "admin client sent a line over \(AgentLimits.adminLineBytesMax) bytes; closing it")
        let failure = AdminFailure(.lineTooLong, "request line exceeds \(AgentLimits.adminLineBytesMax) bytes; closing the connection")
        // Requests already read are dropped: the connection is going away.
        lines = []
        decodedAhead = nil
        buffer = []
        connection.send(AdminResponse.failure(id: nil, failure))
        connection.closeWhenFlushed()
    }

    /// The client ended its stream: its last line counts even without a newline; once every
    /// request is answered the connection closes (see the type's comment).
    private func endOfInput() {
        dispatchPrecondition(condition: .onQueue(queue))
        inputEnded = true
        takeBufferedLine()
        handleNext()
    }

    /// Queues the buffered line as a request, unless it is blank (or a lone `\r`), and empties
    /// the buffer.
    private func takeBufferedLine() {
        if !buffer.isEmpty && buffer != [UInt8(ascii: "\r")] { lines.append(buffer) }
        buffer = []
        if busy { decodeAhead() }
    }

    /// Requests that may be handled while others of their kind are: a resolver's answers, each
    /// about its own ticket, which the agent writes in batches.
    private static func pipelines(_ request: AdminRequest) -> Bool {
        request.command == "resolver.answer"
    }

    private func handleNext() {
        dispatchPrecondition(condition: .onQueue(queue))
        while !connection.isClosed, let handler {
            guard !lines.isEmpty || decodedAhead != nil else {
                // A stream goes on after a half-close, not after the client closed its socket (that
                // would hold the connection, and one of `adminConnectionsMax`, until the next event).
                if !busy && inputEnded && (!staysOpen || connection.peerHungUp) { connection.closeWhenFlushed() }
                return
            }
            let decoded = decodedAhead ?? AdminRequest.decode(lines.removeFirst())
            decodedAhead = nil
            switch decoded {
            case .failure(let problem):
                respond(at: enqueueResponse(), AdminResponse.failure(id: problem.id, problem.failure))
            case .success(let request):
                let pipelines = Self.pipelines(request)
                if busy && !(pipelines && inFlightPipelines) {
                    decodedAhead = decoded  // waits for the requests in flight
                    return
                }
                inFlightPipelines = busy ? inFlightPipelines && pipelines : pipelines
                inFlight += 1
                let position = enqueueResponse()
                if !pipelines { queue.async { [weak self] in self?.decodeAhead() } }
                handler.handle(request, client: self) { [weak self] result in
                    guard let self else { return }
                    self.queue.async {
                        switch result {
                        case .success(let members): self.respond(at: position, AdminResponse.success(id: request.id, members))
                        case .failure(let failure): self.respond(at: position, AdminResponse.failure(id: request.id, failure))
                        }
                        self.inFlight -= 1
                        self.handleNext()
                    }
                }
                if !pipelines { return }
            }
        }
    }

    /// A slot for the next response in request order; its position.
    private func enqueueResponse() -> Int {
        responses.append(nil)
        return responsesBase + responses.count - 1
    }

    /// Fills the response at `position` and sends every response now complete at the front.
    private func respond(at position: Int, _ line: [UInt8]) {
        responses[position - responsesBase] = line
        while let first = responses.first, let ready = first {
            connection.send(ready)
            responses.removeFirst()
            responsesBase += 1
        }
    }

    /// While a request runs, decodes the next line, if one is waiting and none is decoded yet.
    private func decodeAhead() {
        guard busy, decodedAhead == nil, !lines.isEmpty, !connection.isClosed else { return }
        if inFlightPipelines { return handleNext() }
        decodedAhead = AdminRequest.decode(lines.removeFirst())
    }

    private func closed() {
        dispatchPrecondition(condition: .onQueue(queue))
        isClosed = true
        let handlers = closeHandlers
        closeHandlers = []
        for handler in handlers { handler() }
    }
}
