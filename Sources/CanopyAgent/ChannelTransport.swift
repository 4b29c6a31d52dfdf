import CanopyCrypto
import CanopyReplication
import CanopyWire
import Dispatch

/// A peer link's `ConnectionTransport` over an authenticated TCP connection: messages of protocol
/// version 2 are encoded (CanopyWire), split into fragments, sealed into secretstream frames
/// (CanopyCrypto) and written; frames read are opened, reassembled and decoded. A `close` message
/// travels in the frame with the FINAL tag (Protocol/replication-v1.md §5, §6.11; the messages
/// are replication-v2.md's). Bytes that do not decode are reported as a violation, for the mux to
/// answer with the error's code.
///
/// Invariants: the channel, the assembler and the connection are used only on the connection's
/// queue; events go to the handler on `deliveryQueue` (the replication engine's serial context),
/// in order, and `.closed` is delivered exactly once, last. The first decryption or framing error
/// closes the connection.
final class ChannelTransport: ConnectionTransport, @unchecked Sendable {
    /// The authenticated peer.
    let peer: NodeID
    /// What both ends know about this connection, for the simultaneous-connect rule.
    let identity: SimultaneousConnect.Connection
    private let connection: StreamConnection
    private let deliveryQueue: DispatchQueue
    private var channel: SecureChannel
    private var assembler = MessageAssembler()
    private var handler: (@Sendable (ConnectionEvent) -> Void)?
    private var backlog: [ConnectionEvent] = []
    /// The handshake's role: the channel ids a side opens depend on it.
    let role: MultiplexStateMachine.Role
    private var finalSent = false
    private var closedDelivered = false
    /// Bytes arrived from the peer after the handshake (to tell a refusal from a dropped link).
    private var receivedAny = false

    init(connection: StreamConnection, session: EstablishedSession, localNodeID: NodeID, deliveryQueue: DispatchQueue) {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        var entropy = SystemEntropy()
        self.connection = connection
        self.deliveryQueue = deliveryQueue
        self.peer = session.peer
        self.channel = SecureChannel(session: session, random: &entropy)
        let initiator = session.role == .initiator ? localNodeID : session.peer
        let responder = session.role == .initiator ? session.peer : localNodeID
        self.identity = SimultaneousConnect.Connection(initiator: initiator, responder: responder, transcriptHash: session.transcriptHash)
        self.role = session.role == .initiator ? .initiator : .responder
        connection.replaceHandlers(onRead: { [self] in received($0) }, onClose: { [self] in connectionEnded() })
        received([])  // bytes that arrived with the last handshake message
    }

    func start(_ handler: @escaping @Sendable (ConnectionEvent) -> Void) {
        connection.queue.async { [self] in
            self.handler = handler
            let pending = backlog
            backlog = []
            for event in pending { deliver(event) }
        }
    }

    func send(_ message: ConnectionMessage) {
        connection.queue.async { [self] in write(message) }
    }

    func close(_ reason: TransportCloseReason) {
        connection.queue.async { [self] in
            if !finalSent {
                let code: ErrorCode
                switch reason {
                case .localClosed, .peerClosed: code = .goingAway
                case .failed: code = .channelFailure
                case .protocolViolation: code = .malformedMessage
                }
                write(.close(Close(code: code, reason: "\(reason)")))
            }
            finish(reason)
            connection.closeWhenFlushed()
        }
    }

    /// Seals and queues one message; a `close` goes with FINAL and nothing may follow it.
    private func write(_ message: ConnectionMessage) {
        guard !finalSent, !connection.isClosed else { return }
        let isClose: Bool
        if case .close = message { isClose = true } else { isClose = false }
        let plaintexts = MessageFragmenter.plaintexts(encoding: message)
        do throws(CryptoError) {
            for (index, plaintext) in plaintexts.enumerated() {
                connection.send(try channel.seal(plaintext, final: isClose && index == plaintexts.count - 1))
            }
        } catch {
            fail(.failed("cannot seal a frame: \(error)"))
        }
        if isClose { finalSent = true }
    }

    private func received(_ bytes: ArraySlice<UInt8>) {
        guard !closedDelivered else { return }
        receivedAny = true
        let events: [ChannelEvent]
        do throws(CryptoError) { events = try channel.receive(bytes) } catch { return fail(.failed("channel: \(error)")) }
        for event in events {
            switch event {
            case .finished:
                finish(.peerClosed)
                connection.closeWhenFlushed()
            case .message(let plaintext):
                switch assembler.append(plaintext: plaintext) {
                case .incomplete: continue
                case .failure(let error): return fail(.protocolViolation("\(error)"))
                case .message(let bytes):
                    do throws(ProtocolError) { deliver(.message(try ConnectionMessage.decode(bytes))) } catch {
                        // The mux answers it with a `close` naming the error, then closes.
                        deliver(.violation(error))
                        return
                    }
                }
            }
        }
    }

    private func connectionEnded() {
        guard !closedDelivered else { return }
        do throws(CryptoError) {
            try channel.receiveEnd()
            finish(.peerClosed)
        } catch .channelEndedWithoutFinal {
            // In the user's words: a peer that hangs up without the channel's FINAL frame before
            // sending anything at all is, nearly always, one that does not allow this node
            // (replication-v1.md §4.6: it closes and lists this node as pending).
            finish(.failed(receivedAny
                ? "the peer closed the connection without ending it cleanly (it was killed, or its network went away)"
                : ChannelMux.closedAfterHandshake))
        } catch {
            finish(.failed("connection ended: \(error)"))
        }
    }

    /// Reports `reason` first, so the close handler's EOF check does not report another.
    private func fail(_ reason: TransportCloseReason) {
        finish(reason)
        connection.close()
    }

    private func finish(_ reason: TransportCloseReason) {
        guard !closedDelivered else { return }
        closedDelivered = true
        deliver(.closed(reason))
    }

    private func deliver(_ event: ConnectionEvent) {
        guard let handler else { return backlog.append(event) }
        deliveryQueue.async { handler(event) }
    }
}
