import CanopyAdmin
import CanopyCore
import DequeModule
import Dispatch

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

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
    /// Whether the client is idle, for the server's choice of whom to close to make room.
    private let activity: AdminClientActivity
    /// The client sits on an operator slot: only `AdminClientSlots.operatorCommands` are served.
    private let operatorOnly: Bool
    /// Bounds the request bytes all clients hold together (`RequestBytesBudget`).
    private let requestBudget: RequestBytesBudget
    /// Where this client stands with `requestBudget`.
    private var grant = Grant.none
    /// Numbers the grant requests, so that a grant that arrives after its request was withdrawn
    /// is told apart from the answer to a later one.
    private var grantRequests = 0
    /// Bytes of the lines read and not answered yet (in `lines`, decoded ahead or in flight);
    /// with `buffer`, what the client holds against `requestBudget`.
    private var heldLineBytes = 0
    private var buffer: [UInt8] = []
    private var lines: [PendingLine] = []
    /// The upload whose bytes the connection is reading (the line-reading resumes after them).
    private var upload: Upload?
    /// The body being sent after a response: later responses wait for it.
    private var sendingBody: (any AdminBodySource)?
    /// Requests handed to the handler and not answered yet.
    private var inFlight = 0
    /// Every request in flight may run beside another of its kind (`pipelines`).
    private var inFlightPipelines = true
    /// The responses of the requests in flight and of lines refused meanwhile, in request order;
    /// nil until the response is known.
    private var responses: Deque<Outgoing?> = []
    /// The position in the request order of `responses.first`.
    private var responsesBase = 0
    private var busy: Bool { inFlight > 0 }
    /// The first of `lines`, already decoded while the request before it ran: decoding a
    /// multi-megabyte `import` line then overlaps the store's write of the previous one. At most
    /// one line is decoded ahead, so a client that pipelines many lines holds them as bytes.
    private var decodedAhead: Result<AdminRequest, AdminDecodeFailure>?
    /// The bytes of the line `decodedAhead` was decoded from.
    private var decodedAheadBytes = 0

    /// A client's standing with the request budget.
    private enum Grant: Equatable {
        /// Within its own share: no grant held or asked for.
        case none
        /// Not read from until the grant numbered so arrives.
        case waiting(Int)
        /// Holds room for one more line of the largest size.
        case granted
    }

    /// Commands whose line is followed by bytes (`length` of them, once the agent said `upload`).
    static let uploadCommands: Set<String> = [Admin.Attach.name]
    /// Commands whose response line is followed by bytes (`length` of them).
    static let downloadCommands: Set<String> = [Admin.GetAttachment.name]
    /// An upload's header is at most this long; a longer line is never taken for one, so only
    /// short lines are decoded as they are read.
    private static let uploadLineBytesMax = 64 * 1024

    /// A request line read and not handled yet: its bytes, or already decoded (an upload's line,
    /// decoded as it was read, then held until its bytes had arrived).
    private enum PendingLine {
        case bytes([UInt8])
        case decoded(Result<AdminRequest, AdminDecodeFailure>)

        /// What it holds against the request budget (an upload's header, at most 64 KiB, and a
        /// refusal count as nothing).
        var heldBytes: Int {
            if case .bytes(let bytes) = self { return bytes.count }
            return 0
        }
    }

    /// An upload in progress: its request, where its bytes go, how many are still to come, and
    /// the failure that ended storing them early (the rest are then read and dropped).
    private struct Upload {
        var request: AdminRequest
        var sink: (any AdminUploadSink)?
        var remaining: Int64
        var failure: AdminFailure?
    }

    /// A response: its line and, for a download, the bytes that follow it.
    private struct Outgoing {
        var line: [UInt8]
        var body: (any AdminBodySource)?
    }
    private var closeHandlers: [@Sendable () -> Void] = []
    private var isClosed = false
    /// The client has ended its stream: no more requests will come.
    private var inputEnded = false
    /// The connection stays open after the client's input ends (it streams events).
    private var staysOpen = false
    /// While a request runs after the client half-closed, checks now and then whether it has
    /// closed its socket completely (nothing else reports that once reading has stopped).
    private var hangUpTimer: (any DispatchSourceTimer)?
    /// Checks that a client holding a grant keeps sending its line (`adminGrantStallSeconds`).
    private var grantStallTimer: (any DispatchSourceTimer)?
    /// When the client's last bytes arrived (uptime nanoseconds).
    private var lastInputAt: UInt64 = 0

    init(
        fd: Int32, handler: any AdminRequestHandler, log: RateLimitedLog, writeBudget: PendingWriteBudget,
        requestBudget: RequestBytesBudget, activity: AdminClientActivity, operatorOnly: Bool
    ) {
        self.requestBudget = requestBudget
        self.connection = StreamConnection(
            fd: fd, queue: queue, pendingWriteBytesMax: AgentLimits.adminPendingWriteBytesMax, writeBudget: writeBudget)
        self.handler = handler
        self.log = log
        self.writeBudget = writeBudget
        self.activity = activity
        self.operatorOnly = operatorOnly
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
        sendLine(encoded: AdminResponseLine.line(value))
    }

    /// Queues a line already encoded (`AdminResponseLine.line`), as an event sent to every subscriber.
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
        activity.startStreaming()
        queue.async { [self] in
            staysOpen = true
            connection.isStream = true
        }
    }

    /// The connection serves a stream (a registered resolver's offers): it is never closed to
    /// make room for another client.
    func holdsStream() {
        activity.startStreaming()
    }

    /// Closes from the server side (agent shutdown).
    func closeFromServer() {
        queue.async { [self] in connection.closeWhenFlushed() }
    }

    /// Closes a client the server claimed as idle the longest (`AdminClientActivity.claim`), after
    /// telling it why: a script that sends its next request reads that line as the answer.
    func closeToMakeRoom() {
        queue.async { [self] in
            connection.send(Self.madeRoomLine)
            connection.closeWhenFlushed()
        }
    }

    /// What a client closed to make room reads (`busy`, with a null `id` as for a refused newcomer).
    static let madeRoomLine = AdminResponseLine.failure(
        id: nil,
        AdminFailure(
            .busy,
            "closed to make room for a new client: all \(AgentLimits.adminConnectionsMax) admin slots were taken and this connection was the one idle the longest; connect again"))

    private func received(_ bytes: ArraySlice<UInt8>) {
        dispatchPrecondition(condition: .onQueue(queue))
        // A client claimed to make room is closing: what it sends now is not run.
        guard activity.beginWork() else { return }
        lastInputAt = DispatchTime.now().uptimeNanoseconds
        var rest = bytes
        while !rest.isEmpty {
            if upload != nil {
                rest = takeUploadBytes(rest)
                continue
            }
            // `firstIndex(of:)` on the contiguous slice (memchr-fast), not a loop over every
            // byte: an import sends megabytes per line.
            guard let index = rest.firstIndex(of: UInt8(ascii: "\n")) else {
                buffer.append(contentsOf: rest)
                guard buffer.count <= AgentLimits.adminLineBytesMax else { return lineTooLong() }
                break
            }
            buffer.append(contentsOf: rest[..<index])
            rest = rest[(index + 1)...]
            guard buffer.count <= AgentLimits.adminLineBytesMax else { return lineTooLong() }
            takeBufferedLine()
        }
        handleNext()
    }

    /// Hands the upload the bytes of `bytes` it still expects; returns the rest. When the last
    /// one has arrived, the upload's request takes its place among the lines (or its failure
    /// does).
    private func takeUploadBytes(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        guard var current = upload else { return bytes }
        let count = Int(min(Int64(bytes.count), current.remaining))
        if let sink = current.sink {
            do {
                try bytes[bytes.startIndex..<(bytes.startIndex + count)].withUnsafeBytes { try sink.write($0) }
            } catch let failure as AdminFailure {
                current.failure = failure
                current.sink = nil
            } catch {
                current.failure = AdminFailure(.failed, "\(error)")
                current.sink = nil
            }
        }
        current.remaining -= Int64(count)
        upload = current
        if current.remaining == 0 { finishUpload() }
        return bytes[(bytes.startIndex + count)...]
    }

    /// Every byte of the upload arrived (or the client's input ended first): its request, with
    /// what was stored, or its failure, is queued as the next line.
    private func finishUpload() {
        guard let current = upload else { return }
        upload = nil
        var result: Result<AdminRequest, AdminDecodeFailure>
        if current.remaining > 0 {
            result = .failure(AdminDecodeFailure(id: current.request.id, failure: AdminFailure(
                .invalidArgument, "the connection ended \(current.remaining) bytes before the end of the upload; nothing was stored")))
        } else if let failure = current.failure {
            result = .failure(AdminDecodeFailure(id: current.request.id, failure: failure))
        } else {
            var request = current.request
            do {
                request.uploaded = try current.sink?.finish()
                result = .success(request)
            } catch {
                result = .failure(AdminDecodeFailure(id: request.id, failure: error))
            }
        }
        lines.append(.decoded(result))
        if busy { decodeAhead() }
    }

    private func lineTooLong() {
        log.log(.warning, kind: "admin.line_too_long", "admin client sent a line over \(AgentLimits.adminLineBytesMax) bytes; closing it")
        let failure = AdminFailure(.lineTooLong, "request line exceeds \(AgentLimits.adminLineBytesMax) bytes; closing the connection")
        // Requests already read are dropped: the connection is going away.
        lines = []
        decodedAhead = nil
        buffer = []
        connection.send(AdminResponseLine.failure(id: nil, failure))
        connection.closeWhenFlushed()
    }

    /// The client ended its stream: its last line counts even without a newline; once every
    /// request is answered the connection closes (see the type's comment).
    ///
    /// A client that closed its socket completely (killed, Ctrl-C, a `--timeout` that ran out) is
    /// gone: nobody reads what it asked for, so the connection closes at once, freeing its slot
    /// of `AgentLimits.adminConnectionsMax` and whatever it held (a `sync` wait ends through its
    /// close handler). Requests it sent that have not started are not run; one already running
    /// finishes, unanswered. A half-closed client is checked for that while a request runs.
    private func endOfInput() {
        dispatchPrecondition(condition: .onQueue(queue))
        inputEnded = true
        if connection.peerHungUp { return clientWentAway() }
        if upload != nil { finishUpload() }
        takeBufferedLine()
        handleNext()
        watchForHangUp()
    }

    /// The client closed its socket while requests were read or running: drop them and close.
    private func clientWentAway() {
        if upload != nil { finishUpload() }  // its partial content is discarded as for a cut-off upload
        lines = []
        decodedAhead = nil
        buffer = []
        hangUpTimer?.cancel()
        hangUpTimer = nil
        connection.close()
    }

    /// Checks every `AgentLimits.adminHangUpCheckSeconds` whether a half-closed client whose
    /// requests still run has gone completely, until the connection closes.
    private func watchForHangUp() {
        guard hangUpTimer == nil, !connection.isClosed else { return }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        let interval = DispatchTimeInterval.milliseconds(Int(AgentLimits.adminHangUpCheckSeconds * 1000))
        timer.schedule(deadline: .now() + interval, repeating: interval)
        timer.setEventHandler { [weak self] in
            guard let self else { return }
            if self.connection.isClosed {
                self.hangUpTimer?.cancel()
                self.hangUpTimer = nil
            } else if self.connection.peerHungUp {
                self.clientWentAway()
            }
        }
        hangUpTimer = timer
        timer.resume()
    }

    /// Queues the buffered line as a request, unless it is blank (or a lone `\r`), and empties
    /// the buffer.
    private func takeBufferedLine() {
        defer {
            buffer = []
            if busy { decodeAhead() }
        }
        guard !buffer.isEmpty && buffer != [UInt8(ascii: "\r")] else { return }
        guard buffer.count <= Self.uploadLineBytesMax, Self.mayNameUpload(buffer) else {
            heldLineBytes += buffer.count
            return lines.append(.bytes(buffer))
        }
        let decoded = AdminRequest.decode(buffer)
        guard case .success(let request) = decoded, Self.uploadCommands.contains(request.command), let handler else {
            return lines.append(.decoded(decoded))
        }
        beginUpload(request, handler)
    }

    /// Whether `line` may be an upload's header: it holds an upload command's name. Lines that do
    /// not are decoded only in their turn (decoding a line twice would cost every `put`).
    private static func mayNameUpload(_ line: [UInt8]) -> Bool {
        uploadCommands.contains { line.firstRange(of: Array($0.utf8)) != nil }
    }

    /// An upload's line was read: the handler checks it and, when it may go ahead, the client is
    /// told `{"upload":{"id":N,"length":L}}` at once (before the responses to requests still in
    /// flight) and the next `length` bytes are its content; refused, its failure is its response
    /// in its turn and the client sends no bytes (Protocol/admin-v1.md §2).
    private func beginUpload(_ request: AdminRequest, _ handler: any AdminRequestHandler) {
        let command: Admin.Attach
        do throws(AdminFailure) {
            command = try request.decode(Admin.Attach.self)
        } catch {
            return lines.append(.decoded(.failure(AdminDecodeFailure(id: request.id, failure: error))))
        }
        switch handler.beginUpload(command) {
        case .failure(let failure):
            lines.append(.decoded(.failure(AdminDecodeFailure(id: request.id, failure: failure))))
        case .success(let sink):
            connection.send(AdminUploadGrant(id: request.id, length: command.length).line)
            upload = Upload(request: request, sink: sink, remaining: command.length)
            if command.length == 0 { finishUpload() }
        }
    }

    /// Requests that may be handled while others of their kind are: a resolver's answers, each
    /// about its own ticket, which the agent writes in batches.
    private static func pipelines(_ request: AdminRequest) -> Bool {
        request.command == "resolver.answer"
    }

    private func handleNext() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard activity.beginWork() else { return }
        defer {
            activity.settle(holdsWork: holdsWork, now: monotonicNow().seconds)
            updateReading()
        }
        while !connection.isClosed, let handler {
            guard !lines.isEmpty || decodedAhead != nil else {
                // A stream goes on after a half-close, not after the client closed its socket (that
                // would hold the connection, and one of `adminConnectionsMax`, until the next event).
                if !busy && sendingBody == nil && inputEnded && (!staysOpen || connection.peerHungUp) { connection.closeWhenFlushed() }
                return
            }
            let (decoded, lineBytes) = takeNextLine()
            switch decoded {
            case .failure(let problem):
                respond(at: enqueueResponse(), Outgoing(line: AdminResponseLine.failure(id: problem.id, problem.failure)))
                heldLineBytes -= lineBytes
            case .success(let request):
                let pipelines = Self.pipelines(request)
                if busy && !(pipelines && inFlightPipelines) {
                    decodedAhead = decoded  // waits for the requests in flight
                    decodedAheadBytes = lineBytes
                    return
                }
                if operatorOnly && !AdminClientSlots.operatorCommands.contains(request.command) {
                    return refuseOnOperatorSlot(request)
                }
                inFlightPipelines = busy ? inFlightPipelines && pipelines : pipelines
                inFlight += 1
                let position = enqueueResponse()
                if !pipelines { queue.async { [weak self] in self?.decodeAhead() } }
                // The response is encoded on this client's queue, not on the handler's: a reply of
                // many megabytes (a `get` of a large document) then does not hold the store's
                // queue, which every other client's document commands and `status` wait for.
                let answered: @Sendable (@escaping @Sendable () -> Outgoing) -> Void = { [weak self] outgoing in
                    guard let self else { return }
                    self.queue.async {
                        self.respond(at: position, outgoing())
                        self.inFlight -= 1
                        self.heldLineBytes -= lineBytes
                        self.handleNext()
                    }
                }
                if Self.downloadCommands.contains(request.command) {
                    handler.handleDownload(request) { result in
                        switch result {
                        case .success(let download):
                            answered { Outgoing(line: AdminResponseLine.success(id: request.id, download.members), body: download.body) }
                        case .failure(let failure): answered { Outgoing(line: AdminResponseLine.failure(id: request.id, failure)) }
                        }
                    }
                } else {
                    handler.handle(request, client: self) { result in
                        switch result {
                        case .success(let members): answered { Outgoing(line: AdminResponseLine.success(id: request.id, members)) }
                        case .failure(let failure): answered { Outgoing(line: AdminResponseLine.failure(id: request.id, failure)) }
                        }
                    }
                }
                if !pipelines { return }
            }
        }
    }

    /// Something that keeps the client from being idle: a request read and unanswered, or bytes
    /// in transfer either way.
    private var holdsWork: Bool {
        busy || !lines.isEmpty || decodedAhead != nil || upload != nil || sendingBody != nil
    }

    /// A command other than the operator's on an operator slot: answered `busy` (naming what the
    /// slot serves), and the connection closed after the answer; nothing after it is run.
    private func refuseOnOperatorSlot(_ request: AdminRequest) {
        let served = AdminClientSlots.operatorCommandsInWords
        respond(at: enqueueResponse(), Outgoing(line: AdminResponseLine.failure(id: request.id, AdminFailure(
            .busy,
            "all \(AgentLimits.adminConnectionsMax) admin slots are held by clients with requests running or streams; this connection has one of the operator's, which serves \(served) only; try again"))))
        lines = []
        decodedAhead = nil
        buffer = []
        connection.closeWhenFlushed()
    }

    /// A slot for the next response in request order; its position.
    private func enqueueResponse() -> Int {
        responses.append(nil)
        return responsesBase + responses.count - 1
    }

    /// Fills the response at `position` and sends every response now complete at the front.
    private func respond(at position: Int, _ outgoing: Outgoing) {
        responses[position - responsesBase] = outgoing
        sendReady()
    }

    /// Sends the responses complete at the front, in order; one with a body is followed by its
    /// body before the next is sent.
    private func sendReady() {
        while sendingBody == nil, let first = responses.first, let ready = first {
            responses.removeFirst()
            responsesBase += 1
            connection.send(ready.line)
            if let body = ready.body {
                sendingBody = body
                sendBodyPart()
            }
        }
    }

    /// Queues the next part of the body being sent once the socket has taken the last one: at
    /// most one part waits in memory. A body that fails (damaged content) closes the
    /// connection: the client gets fewer bytes than announced and knows the body is not whole.
    private func sendBodyPart() {
        guard let body = sendingBody, !connection.isClosed else { return }
        do {
            guard let part = try body.next() else {
                sendingBody = nil
                sendReady()
                return handleNext()
            }
            connection.send(part)
            connection.whenDrained { [weak self] in self?.sendBodyPart() }
        } catch {
            log.log(.warning, kind: "admin.body_failed", "a response's body could not be sent whole; closing the connection: \(error.message)")
            sendingBody = nil
            connection.close()
        }
    }

    /// A pending line as a request (decoding it now unless it was decoded when read).
    private static func decode(_ line: PendingLine) -> Result<AdminRequest, AdminDecodeFailure> {
        switch line {
        case .bytes(let bytes): AdminRequest.decode(bytes)
        case .decoded(let decoded): decoded
        }
    }

    /// While a request runs, decodes the next line, if one is waiting and none is decoded yet.
    private func decodeAhead() {
        guard busy, decodedAhead == nil, !lines.isEmpty, !connection.isClosed else { return }
        if inFlightPipelines { return handleNext() }
        let line = lines.removeFirst()
        decodedAhead = Self.decode(line)
        decodedAheadBytes = line.heldBytes
    }

    /// The next request to handle (the one decoded ahead, else the first line, decoded now) and
    /// the bytes its line holds against the request budget until it is answered.
    private func takeNextLine() -> (Result<AdminRequest, AdminDecodeFailure>, Int) {
        if let decoded = decodedAhead {
            decodedAhead = nil
            return (decoded, decodedAheadBytes)
        }
        let line = lines.removeFirst()
        return (Self.decode(line), line.heldBytes)
    }

    /// Reads on while the client holds no more than its own share of request bytes, or than its
    /// share and a grant; otherwise stops reading, and asks for a grant if it holds none
    /// (`RequestBytesBudget`). A grant no longer needed is given back. Room for one more read
    /// is kept, so that the bound holds after it.
    private func updateReading() {
        guard !connection.isClosed, !inputEnded else { return }
        let held = buffer.count + heldLineBytes + AgentLimits.socketReadChunkBytes
        let own = AgentLimits.adminRequestBytesPerClientMax
        if held <= own {
            withdrawGrant()
            return connection.resumeReading()
        }
        switch grant {
        case .granted:
            held <= own + AgentLimits.adminLineBytesMax ? connection.resumeReading() : connection.pauseReading()
        case .waiting:
            connection.pauseReading()
        case .none:
            connection.pauseReading()
            grantRequests += 1
            let number = grantRequests
            grant = .waiting(number)
            let owner = ObjectIdentifier(self)
            let onGrant: @Sendable () -> Void = { [weak self] in
                guard let self else { return }
                self.queue.async { self.granted(number) }
            }
            if requestBudget.request(owner, onGrant: onGrant) {
                granted(number)
            }
        }
    }

    /// The grant asked for as `number` arrived: reading goes on, unless it was withdrawn since.
    private func granted(_ number: Int) {
        guard grant == .waiting(number) else { return }
        grant = .granted
        guard !connection.isClosed else { return withdrawGrant() }
        lastInputAt = DispatchTime.now().uptimeNanoseconds
        watchGrantForStall()
        updateReading()
    }

    /// Gives back the grant held or asked for.
    private func withdrawGrant() {
        guard grant != .none else { return }
        grant = .none
        grantStallTimer?.cancel()
        grantStallTimer = nil
        requestBudget.release(ObjectIdentifier(self))
    }

    /// While the grant is held, closes the client once a line it is sending (bytes buffered, no
    /// newline yet, reading not paused by the agent) has had no byte for `adminGrantStallSeconds`.
    private func watchGrantForStall() {
        guard grantStallTimer == nil else { return }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        let interval = DispatchTimeInterval.milliseconds(Int(min(AgentLimits.adminGrantStallSeconds / 4, 5) * 1000))
        timer.schedule(deadline: .now() + interval, repeating: interval)
        timer.setEventHandler { [weak self] in
            guard let self, self.grant == .granted, !self.connection.isClosed else { return }
            // Time the agent itself held the line back, or with no line arriving, is not the client's.
            guard !self.buffer.isEmpty, self.connection.isReading else {
                self.lastInputAt = DispatchTime.now().uptimeNanoseconds
                return
            }
            let idle = Double(DispatchTime.now().uptimeNanoseconds - self.lastInputAt) / 1e9
            guard idle >= AgentLimits.adminGrantStallSeconds else { return }
            self.grantStalled()
        }
        grantStallTimer = timer
        timer.resume()
    }

    /// The client stopped sending the large line it holds a grant for: it is told and closed,
    /// and the grant goes to the next client waiting.
    private func grantStalled() {
        log.log(
            .warning, kind: "admin.grant_stalled",
            "admin client sent no byte of its large request for \(Int(AgentLimits.adminGrantStallSeconds)) s; closing it to free its room for others")
        let failure = AdminFailure(
            .invalidArgument,
            "no byte of this request line arrived for \(Int(AgentLimits.adminGrantStallSeconds)) s; closing the connection (nothing of the line was run)")
        lines = []
        decodedAhead = nil
        buffer = []
        withdrawGrant()
        connection.send(AdminResponseLine.failure(id: nil, failure))
        connection.closeWhenFlushed()
    }

    private func closed() {
        dispatchPrecondition(condition: .onQueue(queue))
        isClosed = true
        withdrawGrant()
        hangUpTimer?.cancel()
        hangUpTimer = nil
        let handlers = closeHandlers
        closeHandlers = []
        for handler in handlers { handler() }
    }
}
