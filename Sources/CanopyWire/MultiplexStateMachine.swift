import CanopyCore

/// The rules of a multiplexed connection (`Protocol/replication-v2.md` §4), as a pure state machine
/// in the style of `ConnectionStateMachine`: the shell reports each decoded `ConnectionMessage`
/// with `receive(_:)` and each local request (`open`, `answer`, `detach`, `send`, `close`), and
/// carries out the returned actions. The peer's `attach` comes out as `attachRequested`, which
/// the shell answers with `answer(_:_:)` before it reports the next message. Each channel's own messages are checked by that channel's session
/// (its own `ConnectionStateMachine`); this machine checks only the envelope and the channel ids.
///
/// ```
/// awaitingHello ──hello (v ≥ 2)──▶ ready ──close(local)──▶ closing ──▶ closed
///        └──────close received, a violation, or hello v1 (unsupportedVersion)──▶ closed
///
/// channel id (either side):   opening ─attach echo─▶ open ─detach sent─▶ detaching ─detach received─▶ dead
///                                │                    └──detach received (answered)──────────────────▶ dead
///                                └─detach received (refused, answered)─▶ dead
///   responder, crossing attaches: opening ─▶ superseded ─initiator's detach (answered)─▶ dead
/// ```
///
/// Invariants: an id is dead once this side has sent and received a `detach` for it, and is then
/// never valid again; at most one channel claims a database, except while crossing attaches
/// resolve; messages for a channel this side has detached are discarded until the peer's
/// `detach` arrives (so no race is fatal); the first violation sends `close` and nothing after it
/// is delivered. The tables hold at most twice the announced `channelsMax` ids.
package struct MultiplexStateMachine: Sendable {
    /// Which end of the handshake this side was: the initiator opens odd channel ids and wins
    /// crossing attaches.
    package enum Role: Sendable, Equatable {
        case initiator, responder
    }

    /// Where the connection is.
    package enum State: String, Sendable, Equatable {
        case awaitingHello, ready, closing, closed
    }

    /// The answer to the peer's `attach`.
    package enum AttachDecision: Equatable, Sendable {
        case accept
        case refuse(code: ErrorCode, message: String)
    }

    /// What the shell must do.
    package enum Action: Equatable, Sendable {
        /// Send this message on the connection.
        case send(ConnectionMessage)
        /// The peer's connection `hello` arrived and was accepted.
        case connected(ConnectionHello)
        /// The peer asks for a channel for this database: call `answer` before the next message.
        case attachRequested(ChannelID, DatabaseName)
        /// A channel for `database` is open: ours accepted, the peer's accepted by `answer`, or
        /// (crossing attaches, on the responder) the peer's taking the place of ours.
        case opened(ChannelID, DatabaseName)
        /// Our request to attach `database` was refused (by the peer or locally).
        case refused(DatabaseName, code: ErrorCode, message: String)
        /// A message of an open channel's session.
        case deliver(ChannelID, Message)
        /// The peer detached an open channel.
        case detached(ChannelID, code: ErrorCode, message: String)
        /// A connection-level `error` (request id 0): worth a log line, nothing more.
        case report(ErrorMessage)
        /// Close the connection (after flushing what was sent); every channel is gone.
        case closeTransport(code: ErrorCode)
    }

    /// One channel id's life on this side.
    enum ChannelState: Equatable, Sendable {
        /// The peer sent `attach`; our answer is due (within the same step).
        case requested(DatabaseName)
        /// We sent `attach`; no answer yet.
        case opening(DatabaseName)
        /// Both sides attached.
        case open(DatabaseName)
        /// We sent `detach`; the peer's `detach` (its answer, or its own) ends the id.
        case detaching(DatabaseName)
        /// Responder only: our `attach` crossed the initiator's for the same database; the
        /// initiator's `detach` (code `conflict`) for it is due and will be answered.
        case superseded(DatabaseName)

        var database: DatabaseName {
            switch self {
            case .requested(let name), .opening(let name), .open(let name), .detaching(let name), .superseded(let name):
                return name
            }
        }
    }

    package let role: Role
    package let localHello: ConnectionHello
    package private(set) var state: State = .awaitingHello
    package private(set) var peerHello: ConnectionHello?
    /// The violation that closed the connection, if one did.
    package private(set) var violation: ProtocolError?

    /// Every id that is not dead.
    private(set) var channels: [ChannelID: ChannelState] = [:]
    /// The ids not dead claiming each database (one, or two while crossing attaches resolve).
    private var claims: [DatabaseName: [ChannelID]] = [:]
    /// Databases to attach once the peer's `hello` arrives or their previous channel is dead.
    private var deferredOpens: [DatabaseName] = []
    /// The next id we open.
    private var nextOwnChannel: ChannelID
    /// The highest id the peer opened so far (its ids only count up).
    private var lastPeerChannel: ChannelID = 0

    /// A machine for a connection whose handshake just finished; `start()` gives our `hello`.
    package init(role: Role, localHello: ConnectionHello) {
        self.role = role
        self.localHello = localHello
        nextOwnChannel = role == .initiator ? 1 : 2
    }

    /// The first action of every connection: send our connection `hello`.
    package func start() -> [Action] {
        [.send(.hello(localHello))]
    }

    /// The open channels, by id.
    package var openChannels: [ChannelID: DatabaseName] {
        channels.compactMapValues { if case .open(let name) = $0 { return name } else { return nil } }
    }

    /// Ids that are not dead (open, opening, detaching, superseded, or awaiting our answer).
    package var channelCount: Int { channels.count }

    /// True when `channel` was opened by this side (its parity is ours).
    package func isOwn(_ channel: ChannelID) -> Bool {
        (channel % 2 == 1) == (role == .initiator)
    }

    // MARK: Local requests

    /// Asks the peer for a channel for `database`. Before the peer's `hello`, or while the
    /// database's previous channel is still detaching, the request waits.
    package mutating func open(_ database: DatabaseName) -> [Action] {
        switch state {
        case .closing, .closed:
            return [.refused(database, code: .goingAway, message: "the connection is closed")]
        case .awaitingHello:
            return deferOpen(database)
        case .ready:
            if let claim = claims[database], !claim.isEmpty {
                if claim.allSatisfy({ if case .detaching = channels[$0] { return true } else { return false } }) {
                    return deferOpen(database)
                }
                return [.refused(database, code: .conflict, message: "database \(database) already has a channel")]
            }
            let peerMax = peerHello?.channelsMax ?? 1
            guard channels.count < min(peerMax, localHello.channelsMax) else {
                return [.refused(database, code: .busy, message: "at most \(min(peerMax, localHello.channelsMax)) channels")]
            }
            let channel = nextOwnChannel
            nextOwnChannel += 2
            insert(channel, .opening(database))
            return [.send(.attach(Attach(channel: channel, database: database)))]
        }
    }

    private mutating func deferOpen(_ database: DatabaseName) -> [Action] {
        guard !deferredOpens.contains(database) else {
            return [.refused(database, code: .conflict, message: "database \(database) is already being attached")]
        }
        deferredOpens.append(database)
        return []
    }

    /// Closes an open channel from our side. Its messages still in flight from the peer are
    /// discarded until the peer's `detach` arrives. Anything but an open channel is left alone.
    package mutating func detach(_ channel: ChannelID, code: ErrorCode, message: String) -> [Action] {
        guard state == .ready, case .open(let database) = channels[channel] else { return [] }
        channels[channel] = .detaching(database)
        return [.send(.detach(Detach(channel: channel, code: code, message: message)))]
    }

    /// Wraps a message of an open channel's session; a message for a channel that is no longer
    /// open (the peer detached it, or we did) is dropped.
    package func send(_ message: Message, on channel: ChannelID) -> [Action] {
        guard state == .ready, case .open = channels[channel] else { return [] }
        return [.send(.channel(channel, message))]
    }

    /// Ends the connection from our side with a `close` carrying `code`.
    package mutating func close(code: ErrorCode, reason: String) -> [Action] {
        guard state == .awaitingHello || state == .ready else { return [] }
        state = .closing
        channels = [:]
        claims = [:]
        let text = reason.truncatedToUTF8(bytes: WireLimits.errorMessageBytesMax)
        return [.send(.close(Close(code: code, reason: text)))]
    }

    /// Reports a violation found below the message layer (frames, decoding): the connection
    /// closes with its code.
    package mutating func fail(_ error: ProtocolError) -> [Action] {
        guard state == .awaitingHello || state == .ready else { return [] }
        violation = error
        return end(code: error.code, reason: Self.reason(for: error))
    }

    /// The transport is gone.
    package mutating func transportClosed() {
        state = .closed
        channels = [:]
        claims = [:]
    }

    /// The `close` reason for a violation: the refusal of a version-1 peer says what to do.
    package static func reason(for error: ProtocolError) -> String {
        if case .unsupportedVersion(let offered) = error, offered >= 1 {
            return "this node speaks replication protocol version \(WireLimits.multiplexedProtocolVersion) only and the "
                + "peer speaks version \(offered): the peer must be upgraded"
        }
        return error.description
    }

    private mutating func end(code: ErrorCode, reason: String) -> [Action] {
        state = .closed
        channels = [:]
        claims = [:]
        let text = reason.truncatedToUTF8(bytes: WireLimits.errorMessageBytesMax)
        return [.send(.close(Close(code: code, reason: text))), .closeTransport(code: code)]
    }

    // MARK: Received messages

    /// Checks a received message against the rules and says what to do.
    package mutating func receive(_ message: ConnectionMessage) -> [Action] {
        switch state {
        case .closed: return []
        case .closing:
            if case .close = message { state = .closed; return [.closeTransport(code: .normal)] }
            return []
        case .awaitingHello, .ready:
            do throws(ProtocolError) {
                return try validate(message)
            } catch {
                return fail(error)
            }
        }
    }

    private mutating func validate(_ message: ConnectionMessage) throws(ProtocolError) -> [Action] {
        switch message {
        case .close(let close):
            state = .closed
            channels = [:]
            claims = [:]
            return [.closeTransport(code: close.code)]
        case .heartbeat: return [.send(.heartbeatEcho)]
        case .heartbeatEcho: return []
        case .hello(let hello):
            guard state == .awaitingHello else { throw unexpected(message) }
            return try receiveHello(hello)
        case .error(let error):
            try requireReady(message)
            guard error.requestID == 0 else {
                throw .invalidReference(detail: "connection-level error names request \(error.requestID)")
            }
            return [.report(error)]
        case .attach(let attach):
            try requireReady(message)
            return try receiveAttach(attach)
        case .detach(let detach):
            try requireReady(message)
            return try receiveDetach(detach)
        case .channel(let channel, let inner):
            try requireReady(message)
            switch channels[channel] {
            case .open: return [.deliver(channel, inner)]
            case .detaching: return []
            default: throw .invalidReference(detail: "channel \(channel) is not open")
            }
        }
    }

    /// Attaches, detaches, channels and errors need both connection `hello`s.
    private func requireReady(_ message: ConnectionMessage) throws(ProtocolError) {
        guard state == .ready else { throw unexpected(message) }
    }

    private func unexpected(_ message: ConnectionMessage) -> ProtocolError {
        .unexpectedMessage(messageType: message.name, state: state.rawValue)
    }

    private mutating func receiveHello(_ hello: ConnectionHello) throws(ProtocolError) -> [Action] {
        guard hello.version >= WireLimits.multiplexedProtocolVersion else { throw .unsupportedVersion(offered: hello.version) }
        guard hello.channelsMax <= WireLimits.channelsMax else {
            throw .outOfRange(field: "hello.channelsMax", value: UInt64(hello.channelsMax), min: 1, max: UInt64(WireLimits.channelsMax))
        }
        if hello.nodeID == localHello.nodeID {
            return end(code: .normal, reason: "the peer is this node")
        }
        peerHello = hello
        state = .ready
        var actions: [Action] = [.connected(hello)]
        let waiting = deferredOpens
        deferredOpens = []
        for database in waiting { actions += open(database) }
        return actions
    }

    private mutating func receiveAttach(_ attach: Attach) throws(ProtocolError) -> [Action] {
        let channel = attach.channel
        let database = attach.database
        if isOwn(channel) {
            // The peer's answer to our attach.
            guard case .opening(let asked) = channels[channel], asked == database else {
                throw .invalidReference(detail: "attach echoes channel \(channel) (\(database)), which we did not open")
            }
            channels[channel] = .open(database)
            return [.opened(channel, database)]
        }
        guard channel > lastPeerChannel else {
            throw .invalidReference(detail: "attach reuses channel \(channel) (the peer's ids count up from \(lastPeerChannel))")
        }
        lastPeerChannel = channel
        let claim = claims[database] ?? []
        if let ours = claim.first, claim.count == 1, case .opening = channels[ours] {
            return crossing(ours: ours, theirs: channel, database: database)
        }
        guard claim.isEmpty else {
            throw .invalidReference(detail: "attach of \(database) on channel \(channel) while channel \(claim[0]) holds it")
        }
        if channels.count >= 2 * localHello.channelsMax {
            throw .windowExceeded(what: "channels (refused attaches unanswered)", limit: 2 * localHello.channelsMax)
        }
        insert(channel, .requested(database))
        guard channels.count <= localHello.channelsMax else {
            return answer(channel, .refuse(code: .busy, message: "at most \(localHello.channelsMax) channels at once"))
        }
        return [.attachRequested(channel, database)]
    }

    /// Answers the peer's `attach` of `channel` (announced by `attachRequested`).
    package mutating func answer(_ channel: ChannelID, _ decision: AttachDecision) -> [Action] {
        guard state == .ready, case .requested(let database) = channels[channel] else { return [] }
        switch decision {
        case .accept:
            channels[channel] = .open(database)
            return [.send(.attach(Attach(channel: channel, database: database))), .opened(channel, database)]
        case .refuse(let code, let message):
            channels[channel] = .detaching(database)
            return [.send(.detach(Detach(channel: channel, code: code, message: message)))]
        }
    }

    /// Crossing attaches for one database: the initiator's channel wins on both sides.
    private mutating func crossing(ours: ChannelID, theirs: ChannelID, database: DatabaseName) -> [Action] {
        switch role {
        case .initiator:
            insert(theirs, .detaching(database))
            return [.send(.detach(Detach(channel: theirs, code: .conflict,
                                         message: "crossing attach of \(database): channel \(ours) of the initiator is kept")))]
        case .responder:
            channels[ours] = .superseded(database)
            insert(theirs, .open(database))
            return [.send(.attach(Attach(channel: theirs, database: database))), .opened(theirs, database)]
        }
    }

    private mutating func receiveDetach(_ detach: Detach) throws(ProtocolError) -> [Action] {
        let channel = detach.channel
        guard let current = channels[channel] else {
            throw .invalidReference(detail: "detach of channel \(channel), which is not attached")
        }
        var actions: [Action] = []
        switch current {
        case .opening(let database):
            actions.append(.refused(database, code: detach.code, message: detach.message))
        case .open:
            actions.append(.detached(channel, code: detach.code, message: detach.message))
        case .superseded, .detaching:
            break
        case .requested:
            throw .invalidReference(detail: "detach of channel \(channel) before its attach was answered")
        }
        if case .detaching = current {} else {
            actions.insert(.send(.detach(Detach(channel: channel, code: .normal, message: ""))), at: 0)
        }
        return actions + remove(channel)
    }

    // MARK: Tables

    private mutating func insert(_ channel: ChannelID, _ channelState: ChannelState) {
        channels[channel] = channelState
        claims[channelState.database, default: []].append(channel)
    }

    /// The id is dead: forgets it, and attaches its database again if that was waiting.
    private mutating func remove(_ channel: ChannelID) -> [Action] {
        guard let database = channels.removeValue(forKey: channel)?.database else { return [] }
        claims[database]?.removeAll { $0 == channel }
        guard claims[database]?.isEmpty ?? true else { return [] }
        claims[database] = nil
        guard let waiting = deferredOpens.firstIndex(of: database) else { return [] }
        deferredOpens.remove(at: waiting)
        return open(database)
    }
}
