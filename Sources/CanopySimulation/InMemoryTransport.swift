import CanopyReplication
import CanopyWire

/// A connected pair of in-memory transports on a `SimulatedScheduler`. Every message is encoded
/// to its wire bytes and decoded on the other side (so the codec runs as it does over TCP, and
/// bytes are counted), then delivered after `latencySeconds` of virtual time, in order.
///
/// `cut()` severs the connection at once, as a reset would: messages in flight are lost and both
/// sides see `.closed(.failed)`.
public final class InMemoryLink: @unchecked Sendable {
    /// One end of the link.
    public final class Endpoint: MessageTransport, @unchecked Sendable {
        /// Strong while open (the sessions own the endpoints, and the endpoints keep the link
        /// alive); released once this end has closed.
        fileprivate var link: InMemoryLink?
        fileprivate let side: Int
        fileprivate var handler: (@Sendable (TransportEvent) -> Void)?
        fileprivate var backlog: [TransportEvent] = []
        fileprivate var closed = false
        /// Wire bytes this end sent (message bytes, before framing and encryption).
        public private(set) var bytesSent = 0
        /// Messages this end sent.
        public private(set) var messagesSent = 0

        fileprivate init(side: Int) {
            self.side = side
        }

        public func start(_ handler: @escaping @Sendable (TransportEvent) -> Void) {
            self.handler = handler
            let pending = backlog
            backlog = []
            for event in pending { handler(event) }
        }

        public func send(_ message: Message) {
            guard !closed, let link else { return }
            let bytes = message.encoded()
            bytesSent += bytes.count
            messagesSent += 1
            link.carry(bytes, from: side)
        }

        public func close(_ reason: TransportCloseReason) {
            guard !closed, let link else { return }
            link.closeFrom(side: side)
        }

        fileprivate func deliver(_ event: TransportEvent) {
            if case .closed = event {
                guard !closed else { return }
                closed = true
                link = nil
            } else if closed {
                return
            }
            if let handler { handler(event) } else { backlog.append(event) }
        }
    }

    private let scheduler: SimulatedScheduler
    /// Virtual seconds between a send and its delivery.
    public var latencySeconds: Double
    /// The two ends: `ends.0` is the dialler's, `ends.1` the listener's.
    public let ends: (Endpoint, Endpoint)
    private var severed = false
    private var lastDelivery: [Double] = [0, 0]

    /// A link with the given one-way latency.
    public init(scheduler: SimulatedScheduler, latencySeconds: Double = 0.0005) {
        self.scheduler = scheduler
        self.latencySeconds = latencySeconds
        ends = (Endpoint(side: 0), Endpoint(side: 1))
        ends.0.link = self
        ends.1.link = self
    }

    private func endpoint(_ side: Int) -> Endpoint { side == 0 ? ends.0 : ends.1 }

    fileprivate func carry(_ bytes: [UInt8], from side: Int) {
        let receiver = endpoint(1 - side)
        // In order: never deliver before the previous message in the same direction.
        let time = max(scheduler.now + latencySeconds, lastDelivery[side])
        lastDelivery[side] = time
        scheduler.schedule(after: time - scheduler.now) { [weak self] in
            guard let self, !self.severed else { return }
            do {
                receiver.deliver(.message(try Message.decode(bytes)))
            } catch {
                receiver.deliver(.closed(.protocolViolation("undecodable message: \(error)")))
            }
        }
    }

    fileprivate func closeFrom(side: Int) {
        let closer = endpoint(side)
        let other = endpoint(1 - side)
        closer.deliver(.closed(.localClosed))
        // The peer sees the close after the messages already in flight.
        let time = max(scheduler.now + latencySeconds, lastDelivery[side])
        scheduler.schedule(after: time - scheduler.now) { other.deliver(.closed(.peerClosed)) }
    }

    /// Severs the link: undelivered messages are lost; both ends see a failure.
    public func cut() {
        guard !severed else { return }
        severed = true
        scheduler.execute { [ends] in
            ends.0.deliver(.closed(.failed("connection reset")))
            ends.1.deliver(.closed(.failed("connection reset")))
        }
    }
}
