import CanopyCrypto
import CanopyWire
import Dispatch

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Seconds on the monotonic clock as a `Duration`, the time base CanopyCrypto's handshake uses.
func monotonicNow() -> Duration {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return .seconds(spec.tv_sec) + .nanoseconds(spec.tv_nsec)
}

/// Runs CanopyCrypto's handshake state machine (initiator or responder) over a fresh TCP
/// connection: feeds it the bytes read, the end of the stream and a deadline tick, and carries out
/// its actions. On success the connection becomes a `ChannelTransport`.
///
/// Invariants (all on the connection's queue): `completion` is called exactly once; after a
/// failure the connection is closed and nothing more is sent (the state machine's rule). The
/// connection's handlers hold the driver until the handshake ends (then the channel replaces
/// them, or closing drops them), so nobody else needs to keep it alive.
final class HandshakeDriver: @unchecked Sendable {
    private enum Machine {
        case initiator(HandshakeInitiator)
        case responder(HandshakeResponder)

        mutating func receive(_ bytes: ArraySlice<UInt8>, now: Duration) -> [HandshakeAction] {
            switch self {
            case .initiator(var machine): defer { self = .initiator(machine) }; return machine.receive(bytes, now: now)
            case .responder(var machine): defer { self = .responder(machine) }; return machine.receive(bytes, now: now)
            }
        }

        mutating func receiveEnd() -> [HandshakeAction] {
            switch self {
            case .initiator(var machine): defer { self = .initiator(machine) }; return machine.receiveEnd()
            case .responder(var machine): defer { self = .responder(machine) }; return machine.receiveEnd()
            }
        }

        mutating func tick(now: Duration) -> [HandshakeAction] {
            switch self {
            case .initiator(var machine): defer { self = .initiator(machine) }; return machine.tick(now: now)
            case .responder(var machine): defer { self = .responder(machine) }; return machine.tick(now: now)
            }
        }
    }

    typealias Completion = (Result<ChannelTransport, CryptoError>) -> Void

    private let connection: StreamConnection
    private let localNodeID: NodeID
    private let deliveryQueue: DispatchQueue
    private var machine: Machine
    private var completion: Completion?
    private var timer: (any DispatchSourceTimer)?

    /// Prepares a handshake; `initiator` is true for connections this node dialled.
    init(
        connection: StreamConnection, initiator: Bool, configuration: HandshakeConfiguration,
        deliveryQueue: DispatchQueue, completion: @escaping Completion
    ) {
        self.connection = connection
        self.localNodeID = configuration.identity.nodeID
        self.deliveryQueue = deliveryQueue
        self.completion = completion
        var entropy = SystemEntropy()
        let now = monotonicNow()
        machine = initiator
            ? .initiator(HandshakeInitiator(configuration: configuration, now: now, random: &entropy))
            : .responder(HandshakeResponder(configuration: configuration, now: now, random: &entropy))
    }

    /// Starts reading (and, as initiator, sends Msg1). Call on the connection's queue.
    func start() {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        connection.start(
            onRead: { [self] bytes in perform(machine.receive(bytes, now: monotonicNow())) },
            onClose: { [self] in perform(machine.receiveEnd()) })
        let source = DispatchSource.makeTimerSource(queue: connection.queue)
        // Just after the state machine's own deadline, so its tick reports the timeout.
        source.schedule(deadline: .now() + .milliseconds(Int(WireLimits.handshakeTimeoutSeconds * 1000) + 50))
        source.setEventHandler { [self] in perform(machine.tick(now: monotonicNow())) }
        timer = source
        source.resume()
        if case .initiator(let initiator) = machine { perform(initiator.start()) }
    }

    /// Gives up the handshake as if the peer had closed (its slot went to another connection):
    /// the connection closes and `completion` reports the failure.
    func abandon() {
        connection.queue.async { [self] in perform(machine.receiveEnd()) }
    }

    private func perform(_ actions: [HandshakeAction]) {
        for action in actions {
            guard completion != nil else { return }
            switch action {
            case .send(let bytes):
                connection.send(bytes)
            case .established(let session):
                finish(.success(ChannelTransport(
                    connection: connection, session: session, localNodeID: localNodeID, deliveryQueue: deliveryQueue)))
            case .fail(let error):
                connection.close()
                finish(.failure(error))
            }
        }
    }

    private func finish(_ result: Result<ChannelTransport, CryptoError>) {
        timer?.cancel()
        timer = nil
        let completion = self.completion
        self.completion = nil
        completion?(result)
    }
}
