import CanopyCore
import CanopyWire
import Logging

/// Several databases' replication over one connection to a peer (`Protocol/replication-v2.md`):
/// the mux sends and checks the connection hellos, then gives a `MessageTransport` per open
/// channel — a `MuxChannel` — over which an unchanged `ReplicationSession` runs for one database.
///
///     let mux = ChannelMux(connection: c, role: .initiator, nodeID: id, scheduler: s,
///                          onAttach: { name in shared(name) ? .accept { start(session over $0) }
///                                                           : .refuse(code: .forbidden, message: "…") },
///                          onClosed: { reason in … })
///     mux.start()
///     mux.open(notes) { result in if case .opened(let channel) = result { start(session over channel) } }
///
/// The rules are `MultiplexStateMachine`'s (CanopyWire); this class is their shell: it carries
/// messages between the connection and the channels, answers the peer's attaches with
/// `onAttach`, and keeps the connection alive with heartbeats when no channel speaks (the
/// sessions' own heartbeats travel inside their channels). Messages go to the connection in the
/// order they are sent (spec §6: each session's window is what keeps one database from
/// starving the others).
///
/// Everything runs on the serial context of `scheduler`: the connection delivers there, the
/// sessions call in from there, and every callback is made there. It holds no lock.
package final class ChannelMux: @unchecked Sendable {
    /// The answer to the peer's request for a channel.
    package enum AttachAnswer: Sendable {
        /// Open the channel and hand it to this closure (which typically starts a session on it).
        case accept(@Sendable (MuxChannel) -> Void)
        /// Refuse it with `detach`: `forbidden` or `notFound`, with a message for the peer's operator.
        case refuse(code: ErrorCode, message: String)
    }

    /// The outcome of `open`.
    package enum OpenResult: Sendable {
        /// The channel is open (the peer accepted ours, or, crossing attaches, we hold the peer's).
        case opened(MuxChannel)
        /// The peer refused it, or this side could not ask (too many channels, already attaching).
        case refused(code: ErrorCode, message: String)
        /// The connection ended before the channel opened; the message says why (a version-1
        /// peer refused, say).
        case connectionEnded(String)
    }

    private let connection: any ConnectionTransport
    private let scheduler: any ReplicationScheduler
    private let logger: Logger
    private let onAttach: @Sendable (DatabaseName) -> AttachAnswer
    private let onClosed: @Sendable (TransportCloseReason) -> Void
    private var machine: MultiplexStateMachine
    private var liveness: Liveness
    private var heartbeatTimer: (any Cancellable)?
    /// The open channels.
    private var channels: [ChannelID: MuxChannel] = [:]
    /// Our requests for a channel, by database (the machine allows one at a time per database).
    private var pendingOpens: [DatabaseName: @Sendable (OpenResult) -> Void] = [:]
    /// Accepted requests of the peer, by database, until the machine says the channel is open.
    private var acceptedAttaches: [DatabaseName: @Sendable (MuxChannel) -> Void] = [:]
    /// Why a connection ended when the peer closed it after the handshake and before saying
    /// anything: the handshake proved who this node is, so nearly always the peer does not allow
    /// it (Protocol/replication-v1.md §4.6: it closes and lists this node as pending).
    package static let closedAfterHandshake = "the peer closed the connection right after the handshake: most likely it does not allow "
        + "this node (it then lists this node as pending: `canopyctl peers` there, and `canopyctl peer accept` allows it)"

    /// Why the connection ended, once it has.
    package private(set) var closeReason: TransportCloseReason?

    /// A mux over `connection`, whose handshake this side ran as `role`. `nodeID` (16 bytes) is
    /// this node's connection id (self-connection detection); `channelsMax` is announced to the
    /// peer. Heartbeats follow `heartbeatIntervalSeconds`; a peer silent for `deadIntervals`
    /// intervals is dead.
    package init(
        connection: any ConnectionTransport, role: MultiplexStateMachine.Role, nodeID: [UInt8],
        channelsMax: Int = WireLimits.channelsMax, scheduler: any ReplicationScheduler,
        heartbeatIntervalSeconds: Double = 10, deadIntervals: Double = 3,
        logger: Logger = Logger(label: "canopy.mux"),
        onAttach: @escaping @Sendable (DatabaseName) -> AttachAnswer,
        onClosed: @escaping @Sendable (TransportCloseReason) -> Void = { _ in }
    ) {
        self.connection = connection
        self.scheduler = scheduler
        self.logger = logger
        self.onAttach = onAttach
        self.onClosed = onClosed
        machine = MultiplexStateMachine(role: role, localHello: ConnectionHello(nodeID: nodeID, channelsMax: channelsMax))
        liveness = Liveness(intervalSeconds: heartbeatIntervalSeconds, deadIntervals: deadIntervals, now: scheduler.now)
    }

    /// True once the connection has ended.
    package var isClosed: Bool { closeReason != nil }
    /// The peer's connection hello, once it arrived.
    package var peerHello: ConnectionHello? { machine.peerHello }
    /// The open channels' databases, by channel id.
    package var openChannels: [ChannelID: DatabaseName] { channels.mapValues(\.database) }

    /// Sends our connection hello and starts listening and heartbeats. On the serial context.
    package func start() {
        scheduler.assertOnContext()
        connection.start { [weak self] event in self?.handle(event) }
        perform(machine.start())
        scheduleHeartbeat()
    }

    /// Asks the peer for a channel for `database`; `completion` runs once, on the serial context.
    /// Before the peer's hello, or while the database's previous channel is closing, the request
    /// waits.
    package func open(_ database: DatabaseName, _ completion: @escaping @Sendable (OpenResult) -> Void) {
        scheduler.assertOnContext()
        guard pendingOpens[database] == nil else {
            return completion(.refused(code: .conflict, message: "database \(database) is already being attached"))
        }
        pendingOpens[database] = completion
        perform(machine.open(database))
    }

    /// Ends the connection with `close`. Every channel's transport closes as `channels`:
    /// `localClosed` (this node stops replicating over it), or `peerClosed` when the connection
    /// is replaced by a newer one, so that each session's replicator reconnects over that one
    /// with its syncs still waiting, as after a peer hung up.
    package func close(code: ErrorCode = .normal, reason: String = "done", channels: TransportCloseReason = .localClosed) {
        scheduler.assertOnContext()
        guard !isClosed else { return }
        perform(machine.close(code: code, reason: reason))
        finish(.localClosed, channels: channels)
        connection.close(.localClosed)
    }

    // MARK: From the channels

    /// A session's message for the peer.
    fileprivate func send(_ message: Message, on channel: ChannelID) {
        perform(machine.send(message, on: channel))
    }

    /// A session closed its channel.
    fileprivate func detach(_ channel: ChannelID, code: ErrorCode, message: String) {
        guard channels.removeValue(forKey: channel) != nil else { return }
        perform(machine.detach(channel, code: code, message: message))
    }

    // MARK: Events

    private func handle(_ event: ConnectionEvent) {
        guard !isClosed else { return }
        switch event {
        case .message(let message):
            liveness.received(at: scheduler.now)
            perform(machine.receive(message))
        case .violation(let error):
            perform(machine.fail(error))
        case .closed(let reason):
            machine.transportClosed()
            finish(reason)
        }
    }

    /// Carries out the machine's actions. A callback that closes the connection (from a channel's
    /// completion, say) ends the list: `finish` has already told every channel and request.
    private func perform(_ actions: [MultiplexStateMachine.Action]) {
        for action in actions {
            guard !isClosed else { return }
            switch action {
            case .send(let message):
                liveness.sent(at: scheduler.now)
                connection.send(message)
            case .connected(let hello):
                logger.debug("multiplexed connection ready", metadata: ["channelsMax": "\(hello.channelsMax)"])
            case .attachRequested(let channel, let database):
                perform(machine.answer(channel, decision(for: database)))
            case .opened(let channel, let database):
                opened(channel, database)
            case .refused(let database, let code, let message):
                pendingOpens.removeValue(forKey: database)?(.refused(code: code, message: message))
            case .deliver(let channel, let message):
                channels[channel]?.deliver(.message(message))
            case .detached(let channel, let code, let message):
                let reason: TransportCloseReason = code.kind == .notAnError ? .peerClosed : .failed("detached: \(code) \(message)")
                channels.removeValue(forKey: channel)?.deliver(.closed(reason))
            case .report(let error):
                logger.notice("peer reports", metadata: ["code": "\(error.code)", "message": "\(error.message)"])
            case .closeTransport(let code):
                let reason: TransportCloseReason = machine.violation.map { .protocolViolation(MultiplexStateMachine.reason(for: $0)) }
                    ?? (code.kind == .notAnError ? .peerClosed : .failed("closed with \(code)"))
                finish(reason)
                connection.close(reason)
            }
        }
    }

    /// Asks the application about the peer's attach, keeping the accepting closure.
    private func decision(for database: DatabaseName) -> MultiplexStateMachine.AttachDecision {
        switch onAttach(database) {
        case .accept(let handler):
            acceptedAttaches[database] = handler
            return .accept
        case .refuse(let code, let message):
            return .refuse(code: code, message: message)
        }
    }

    /// A channel opened: it answers our request for the database, or the peer's we accepted.
    private func opened(_ channel: ChannelID, _ database: DatabaseName) {
        let transport = MuxChannel(id: channel, database: database, mux: self)
        channels[channel] = transport
        if let completion = pendingOpens.removeValue(forKey: database) {
            completion(.opened(transport))
        } else if let handler = acceptedAttaches.removeValue(forKey: database) {
            handler(transport)
        }
    }

    /// The connection is over: every channel (as `channels`, by default `reason`) and every
    /// request learns it.
    private func finish(_ reason: TransportCloseReason, channels channelReason: TransportCloseReason? = nil) {
        guard !isClosed else { return }
        closeReason = reason
        heartbeatTimer?.cancel()
        let open = channels.values.sorted { $0.id < $1.id }
        channels = [:]
        let waiting = pendingOpens.sorted { $0.key < $1.key }
        pendingOpens = [:]
        acceptedAttaches = [:]
        for channel in open { channel.deliver(.closed(channelReason ?? reason)) }
        // Why the connection ended is why the channel was not opened (a version-1 peer, say).
        let why: String
        switch reason {
        case .localClosed: why = "the connection closed"
        case .peerClosed where machine.peerHello == nil, .failed where machine.peerHello == nil:
            // The handshake succeeded, so the peer knows who this node is; a peer that then
            // closes without a word is, nearly always, one that does not allow this node
            // (Protocol/replication-v1.md §4.6: it closes and lists this node as pending).
            why = Self.closedAfterHandshake
        case .peerClosed: why = "the peer closed the connection"
        case .failed(let detail), .protocolViolation(let detail): why = "the connection closed: \(detail)"
        }
        for (_, completion) in waiting { completion(.connectionEnded(why)) }
        onClosed(reason)
    }

    // MARK: Heartbeats

    private func scheduleHeartbeat() {
        heartbeatTimer = scheduler.schedule(after: liveness.intervalSeconds) { [weak self] in self?.heartbeat() }
    }

    /// Keeps an idle connection alive, and closes one whose peer went silent.
    private func heartbeat() {
        guard !isClosed else { return }
        switch liveness.tick(at: scheduler.now) {
        case .peerDead(let silent):
            perform(machine.close(code: .timeout, reason: "no message for \(silent) s"))
            finish(.failed("peer silent for \(silent) s"))
            connection.close(.failed("dead peer"))
            return
        case .sendHeartbeat:
            liveness.sent(at: scheduler.now)
            connection.send(.heartbeat)
        case .none:
            break
        }
        scheduleHeartbeat()
    }
}

/// One open channel of a `ChannelMux`: the `MessageTransport` of one database's session.
/// Closing it detaches the channel (`normal`; `detach(code:message:)` says more); the peer
/// detaching it, or the connection ending, delivers `.closed`.
package final class MuxChannel: MessageTransport, @unchecked Sendable {
    /// The channel id on the connection.
    package let id: ChannelID
    /// The database the channel carries.
    package let database: DatabaseName
    /// Strong while the channel is open; the mux drops its own reference when the channel ends.
    private var mux: ChannelMux?
    private var handler: (@Sendable (TransportEvent) -> Void)?
    private var backlog: [TransportEvent] = []
    /// True once `.closed` was delivered (or queued).
    private var isClosed = false

    fileprivate init(id: ChannelID, database: DatabaseName, mux: ChannelMux) {
        self.id = id
        self.database = database
        self.mux = mux
    }

    package func start(_ handler: @escaping @Sendable (TransportEvent) -> Void) {
        self.handler = handler
        let pending = backlog
        backlog = []
        for event in pending { handler(event) }
    }

    package func send(_ message: Message) {
        mux?.send(message, on: id)
    }

    /// Detaches the channel with `normal` (the session's own `close`, sent before, says why).
    package func close(_ reason: TransportCloseReason) {
        let text: String
        switch reason {
        case .localClosed, .peerClosed: text = ""
        case .failed(let detail), .protocolViolation(let detail): text = detail
        }
        detach(code: .normal, message: text)
    }

    /// Detaches the channel with `code` and `message` (`goingAway` when the node stops,
    /// `forbidden` when the database stopped being shared); the session sees `.closed(.localClosed)`.
    package func detach(code: ErrorCode, message: String) {
        guard let mux else { return }
        self.mux = nil
        mux.detach(id, code: code, message: message)
        deliver(.closed(.localClosed))
    }

    /// An event from the mux; nothing follows `.closed`.
    fileprivate func deliver(_ event: TransportEvent) {
        guard !isClosed else { return }
        if case .closed = event {
            isClosed = true
            mux = nil
        }
        if let handler { handler(event) } else { backlog.append(event) }
    }
}
