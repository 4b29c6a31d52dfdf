import CanopyAdmin
import CanopyCore
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

    /// Starts an upload (`attach`, the one command in `AdminClient.uploadCommands`): called on
    /// the client's queue as soon as its line is read and decoded, before any of its bytes.
    /// Returns where the `command.length` bytes go, or why the upload is refused (the client then
    /// sends none). Once every byte has arrived, the request goes to `handle` in its turn, with
    /// `uploaded` set.
    func beginUpload(_ command: Admin.Attach) -> Result<any AdminUploadSink, AdminFailure>

    /// Handles a request whose response carries a body (a command in
    /// `AdminClient.downloadCommands`): calls `reply` exactly once, from any queue, with the
    /// response's members and the bytes that follow its line.
    func handleDownload(_ request: AdminRequest, reply: @escaping @Sendable (Result<AdminDownload, AdminFailure>) -> Void)
}

/// Where an upload's bytes go, used on the client's queue only (Protocol/admin-v1.md §2,
/// *Bytes after a line*).
protocol AdminUploadSink: AnyObject {
    /// Takes the next part of the bytes (never more than announced in all).
    func write(_ part: UnsafeRawBufferPointer) throws(AdminFailure)
    /// Every announced byte arrived: stores them and says what was stored.
    func finish() throws(AdminFailure) -> UploadedContent
}

/// The bytes that follow a response's line, produced a part at a time on the client's queue as
/// the socket takes them (never a whole attachment in memory).
protocol AdminBodySource: AnyObject, Sendable {
    /// The next part, or nil after the last. A throw cuts the body short: the connection is
    /// closed, so the client sees fewer bytes than the response announced.
    func next() throws(AdminFailure) -> [UInt8]?
}

/// A download's response: its members (which include the body's `length`) and the body.
struct AdminDownload: Sendable {
    var members: [String: JSONValue]
    var body: any AdminBodySource
}

/// The listening admin socket: accepts connections, checks each peer's uid with SO_PEERCRED, and
/// hands them to `AdminClient`s.
///
/// Invariants: state is touched only on `queue`; at most `AgentLimits.adminConnectionsMax`
/// clients hold general slots and `AgentLimits.adminOperatorConnectionsMax` more hold operator
/// slots (`AdminClientSlots` says who makes room for a newcomer; one that finds every slot busy
/// is told `busy` and closed); a client closed to make room leaves `clients` at once, so it is
/// never counted twice; the bytes queued for all clients
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
    private let requestBudget = RequestBytesBudget(
        grantsMax: AgentLimits.adminRequestBytesSharedMax / AgentLimits.adminLineBytesMax)
    private weak var handler: (any AdminRequestHandler)?
    private var acceptSource: (any DispatchSourceRead)?
    /// Keyed by connection number, never reused (an `ObjectIdentifier` may be: a client closed
    /// to make room leaves at once and may be freed before its close handler has run).
    private var clients: [UInt64: Slot] = [:]
    /// The number the next connection gets (`AdminClientSlots.Candidate.id`).
    private var nextID: UInt64 = 0
    private let slots = AdminClientSlots(
        generalMax: AgentLimits.adminConnectionsMax, operatorMax: AgentLimits.adminOperatorConnectionsMax)
    private var stopped = false

    /// A connected client and what the slot choice needs of it.
    private struct Slot {
        var client: AdminClient
        var activity: AdminClientActivity
        var operatorOnly: Bool
    }

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
            for slot in clients.values { slot.client.closeFromServer() }
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
            guard let handler, let operatorOnly = makeRoom() else {
                clientLog.log(
                    .warning, kind: "admin.refused.busy",
                    "admin connection refused: all \(AgentLimits.adminConnectionsMax) admin slots and the operator's \(AgentLimits.adminOperatorConnectionsMax) are held by clients with requests running or streams")
                Self.refuseBusy(fd)
                continue
            }
            let now = monotonicNow().seconds
            let activity = AdminClientActivity(now: now)
            let client = AdminClient(
                fd: fd, handler: handler, log: clientLog, writeBudget: writeBudget, requestBudget: requestBudget,
                activity: activity, operatorOnly: operatorOnly)
            let key = nextID
            nextID += 1
            clients[key] = Slot(client: client, activity: activity, operatorOnly: operatorOnly)
            client.start { [weak self] in
                guard let self else { return }
                self.queue.async { self.clients[key] = nil }
            }
        }
    }

    /// Finds the newcomer a slot (`AdminClientSlots`), closing the client idle the longest when
    /// that is what it takes; returns whether the slot is an operator's, or nil when every slot
    /// is busy. A client that turns busy between the choice and its claim keeps its slot, and
    /// the choice is made again without it.
    private func makeRoom() -> Bool? {
        dispatchPrecondition(condition: .onQueue(queue))
        var candidates = clients.map { key, slot in
            AdminClientSlots.Candidate(id: key, operatorOnly: slot.operatorOnly, idleSince: slot.activity.idleSinceSeconds)
        }
        while case .admit(let operatorOnly, let closing) = slots.admission(candidates) {
            guard !closing.isEmpty else { return operatorOnly }
            if let key = closing.first(where: { clients[$0]?.activity.claim() == true }), let slot = clients.removeValue(forKey: key) {
                let idleSeconds = monotonicNow().seconds - (candidates.first { $0.id == key }?.idleSince ?? 0)
                clientLog.log(
                    .notice, kind: "admin.made_room",
                    "closed the admin client idle the longest (\(Int(idleSeconds)) s) to make room for a new one: every \(operatorOnly ? "operator" : "admin") slot was taken")
                slot.client.closeToMakeRoom()
                return operatorOnly
            }
            for index in candidates.indices where closing.contains(candidates[index].id) { candidates[index].idleSince = nil }
        }
        return nil
    }

    /// The one line a client over the connection limit gets before the close, so that it can
    /// say "busy" rather than "closed".
    static let busyLine = AdminResponseLine.failure(
        id: nil,
        AdminFailure(
            .busy,
            "the agent already serves \(AgentLimits.adminConnectionsMax + AgentLimits.adminOperatorConnectionsMax) admin clients, each with a request running or a stream; try again"))

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
