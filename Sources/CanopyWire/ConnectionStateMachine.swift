/// The message-level rules of one connection (§7), as a pure state machine in swift-nio's style:
/// the shell reports each decoded message with `receive(_:)` and each message it is about to send
/// with `send(_:)`, and carries out the returned actions. The replication engine sits on top and
/// sees only messages that passed every rule.
///
/// ```
/// awaitingHello ──hello──▶ ready ──close(local)──▶ closing ──(transport closed)──▶ closed
///        └────────close received, or a violation, in any state────────────────────▶ closed
///
/// (`heartbeat` and `heartbeatEcho` are valid in `awaitingHello` too.)
/// ```
///
/// Invariants: a message is delivered only if it is valid in the current state and every request
/// id, entry index and revision position in it refers to something outstanding; the first
/// violation produces `close` with the violation's code, and nothing received after it is
/// delivered. A violation of the rules by *our* side is a programmer error (`precondition`).
/// Tables are keyed by request id and only looked up, never iterated into the wire.
public struct ConnectionStateMachine: Sendable {
    /// Where the connection is (§7.1).
    public enum State: String, Sendable, Equatable {
        /// We have sent our `hello`; only the peer's `hello` (or `close`) is valid.
        case awaitingHello
        /// Both `hello`s exchanged; replication messages flow.
        case ready
        /// We sent `close`; everything received is discarded until the transport closes.
        case closing
        /// The connection is over.
        case closed
    }

    /// What the shell must do.
    public enum Action: Equatable, Sendable {
        /// Send this message (after any messages it was already asked to send).
        case send(Message)
        /// Hand this valid message to the replication engine.
        case deliver(Message)
        /// Hand these revisions, resolved against the `changes` request they answer, to the
        /// engine; `final` says the request has no more (the engine then owes a `revisionsAck`).
        case deliverRevisions(requestID: RequestID, final: Bool, revisions: [ReceivedRevision])
        /// Close the transport (after flushing what was sent). `code` says why.
        case closeTransport(code: ErrorCode)
    }

    public private(set) var state: State = .awaitingHello
    /// The `hello` we send first.
    public let localHello: Hello
    /// The peer's `hello`, once received.
    public private(set) var peerHello: Hello?
    /// The violation that closed the connection, if one did.
    public private(set) var violation: ProtocolError?

    /// Requests in both directions (see ConnectionStateMachine+Requests/+Batches).
    var tables = RequestTables()

    /// A machine for a connection whose handshake just finished; `start()` gives our `hello`.
    public init(localHello: Hello) {
        self.localHello = localHello
    }

    /// The first action of every connection: send our `hello`.
    public func start() -> [Action] {
        [.send(.hello(localHello))]
    }

    /// True when both `hello`s set the `attachments` feature: attachment messages may flow.
    public var attachmentsAgreed: Bool {
        guard let peerHello else { return false }
        return localHello.features & Hello.attachmentsFeature != 0 && peerHello.features & Hello.attachmentsFeature != 0
    }

    /// True when both `hello`s set the `digests` feature: digest messages may flow.
    public var digestsAgreed: Bool {
        guard let peerHello else { return false }
        return localHello.features & Hello.digestsFeature != 0 && peerHello.features & Hello.digestsFeature != 0
    }

    /// Our requests outstanding other than batches and subscriptions (checkpoint and attachment
    /// requests), of the `inFlightRequestsMax` the peer accepts.
    public var ourRequestsOutstanding: Int { tables.ourRequests.count }

    /// True when another `changes` request fits in the window the peer announced.
    public var canSendChanges: Bool {
        guard let peerHello else { return false }
        return tables.outgoingBatches.count < peerHello.window
    }

    /// Checks a received message against the rules and says what to do with it.
    public mutating func receive(_ message: Message) -> [Action] {
        switch state {
        case .closed: return []
        case .closing:
            if case .close = message { state = .closed; return [.closeTransport(code: .normal)] }
            return []
        case .awaitingHello, .ready:
            do throws(ProtocolError) {
                return try validateReceived(message)
            } catch {
                return fail(error)
            }
        }
    }

    /// Reports a violation found below the message layer (a frame, fragment or decoding error):
    /// the connection closes with its code.
    public mutating func fail(_ error: ProtocolError) -> [Action] {
        guard state == .awaitingHello || state == .ready else { return [] }
        violation = error
        state = .closed
        let reason = error.description.truncatedToUTF8(bytes: WireLimits.errorMessageBytesMax)
        return [.send(.close(Close(code: error.code, reason: reason))), .closeTransport(code: error.code)]
    }

    /// Ends the connection from our side with a `close` carrying `code` (e.g. `.normal`,
    /// `.goingAway`, `.timeout`).
    public mutating func close(code: ErrorCode, reason: String) -> [Action] {
        guard state == .awaitingHello || state == .ready else { return [] }
        state = .closing
        let text = reason.truncatedToUTF8(bytes: WireLimits.errorMessageBytesMax)
        return [.send(.close(Close(code: code, reason: text)))]
    }

    /// The transport is gone (EOF, reset, or after we closed).
    public mutating func transportClosed() {
        state = .closed
    }

    /// Applies the rules of §7 to a message received in `awaitingHello` or `ready`; throws the
    /// first violation.
    private mutating func validateReceived(_ message: Message) throws(ProtocolError) -> [Action] {
        if case .close(let close) = message {
            state = .closed
            return [.deliver(message), .closeTransport(code: close.code)]
        }
        if state == .awaitingHello {
            // Heartbeats are valid before the peer's hello: a slow peer must not make a timer fatal.
            if case .heartbeat = message { return [.send(.heartbeatEcho)] }
            if case .heartbeatEcho = message { return [.deliver(message)] }
            guard case .hello(let hello) = message else { throw unexpected(message) }
            // The connection runs at min(ours, theirs); the decoder already refused version 0 and
            // every version ≥ 1 includes version 1, so there is always a common version.
            peerHello = hello
            state = .ready
            return [.deliver(message)]
        }
        switch message {
        case .hello, .close: throw unexpected(message)
        case .heartbeat: return [.send(.heartbeatEcho)]
        case .heartbeatEcho: return [.deliver(message)]
        case .subscribe(let subscribe): try tables.receiveSubscribe(subscribe)
        case .unsubscribe(let unsubscribe): try tables.receiveUnsubscribe(unsubscribe)
        case .changes(let changes): try tables.receiveChanges(changes, window: localHello.window)
        case .changesReply(let reply): try tables.receiveChangesReply(reply)
        case .revisions(let revisions):
            let resolved = try tables.receiveRevisions(revisions)
            return [.deliverRevisions(requestID: revisions.requestID, final: revisions.final, revisions: resolved)]
        case .revisionsAck(let ack): try tables.receiveRevisionsAck(ack)
        case .checkpointGet(let get): try tables.receivePeerRequest(get.requestID, kind: .checkpointGet)
        case .checkpointSet(let set): try tables.receivePeerRequest(set.requestID, kind: .checkpointSet)
        case .checkpoint(let reply): try tables.receiveReply(reply.requestID, to: .checkpointGet, message)
        case .checkpointSetAck(let ack): try tables.receiveReply(ack.requestID, to: .checkpointSet, message)
        case .error(let error): try tables.receiveError(error)
        case .attachmentGet(let get):
            guard attachmentsAgreed else { throw unexpected(message) }
            try tables.receivePeerRequest(get.requestID, kind: .attachmentGet)
        case .attachmentPart(let part):
            guard attachmentsAgreed else { throw unexpected(message) }
            try tables.receiveReply(part.requestID, to: .attachmentGet, message)
        case .digestGet(let get):
            guard digestsAgreed else { throw unexpected(message) }
            try tables.receivePeerRequest(get.requestID, kind: .digestGet)
        case .digestNodes(let nodes):
            guard digestsAgreed else { throw unexpected(message) }
            try tables.receiveReply(nodes.requestID, to: .digestGet, message)
        }
        return [.deliver(message)]
    }

    /// The violation for a message that is not valid in the current state.
    private func unexpected(_ message: Message) -> ProtocolError {
        .unexpectedMessage(messageType: message.type.description, state: state.rawValue)
    }

    /// Records a message we are about to send. Sending something the rules forbid is a bug in
    /// the caller, so it traps rather than putting a violation on the wire.
    public mutating func send(_ message: Message) {
        switch message {
        case .hello: preconditionFailure("hello is sent by start()")
        case .close: preconditionFailure("use close(code:reason:)")
        case .heartbeat, .heartbeatEcho:
            // Carry no state; a timer racing a close is harmless (the peer discards it).
            return
        case .attachmentGet, .attachmentPart:
            precondition(state == .ready && attachmentsAgreed, "attachment messages need both sides' attachments feature")
        case .digestGet, .digestNodes:
            precondition(state == .ready && digestsAgreed, "digest messages need both sides' digests feature")
        default:
            precondition(state == .ready, "replication messages need both hellos and an open connection")
        }
        tables.send(message, peerWindow: peerHello!.window)
    }
}

extension String {
    /// The longest prefix of the string whose UTF-8 form fits in `bytes`, cut at a character
    /// boundary (so human-readable texts always fit their wire limit).
    package func truncatedToUTF8(bytes: Int) -> String {
        if utf8.count <= bytes { return self }
        var result = ""
        var used = 0
        for character in self {
            let size = character.utf8.count
            if used + size > bytes { break }
            result.append(character)
            used += size
        }
        return result
    }
}
