import CanopySimulation
import CanopyWire
@testable import CanopyReplication

/// A connected pair of in-memory `ConnectionTransport`s on a `SimulatedScheduler`: each message is
/// encoded to its wire bytes and decoded by the other end with the version-2 decoder (bytes that
/// do not decode arrive as `.violation`), in order, after `latencySeconds`. An end also serves as
/// a scripted peer: a test starts it with its own handler, sends what it likes (`inject` sends raw
/// bytes) and reads `received`.
final class ConnectionPipe: @unchecked Sendable {
    /// One end of the pipe.
    final class End: ConnectionTransport, @unchecked Sendable {
        fileprivate weak var pipe: ConnectionPipe?
        fileprivate let side: Int
        private let inbox = TransportInbox<ConnectionEvent>()
        /// True once `.closed` was delivered here.
        var isClosed: Bool { inbox.isClosed }
        /// Every message this end received, in order.
        private(set) var received: [ConnectionMessage] = []

        fileprivate init(side: Int) {
            self.side = side
        }

        func start(_ handler: @escaping @Sendable (ConnectionEvent) -> Void) { inbox.start(handler) }

        func send(_ message: ConnectionMessage) {
            inject(message.encoded())
        }

        /// Sends raw bytes as one message (a misbehaving peer).
        func inject(_ bytes: [UInt8]) {
            guard !isClosed else { return }
            pipe?.carry(bytes, from: side)
        }

        func close(_ reason: TransportCloseReason) {
            guard !isClosed else { return }
            pipe?.close(from: side)
        }

        /// The messages received since the last call.
        func take() -> [ConnectionMessage] {
            defer { received = [] }
            return received
        }

        fileprivate func deliver(_ event: ConnectionEvent) {
            guard !isClosed else { return }
            var closes = false
            switch event {
            case .closed: closes = true
            case .message(let message): received.append(message)
            case .violation: break
            }
            inbox.deliver(event, closes: closes)
        }
    }

    let scheduler: SimulatedScheduler
    let latencySeconds: Double
    /// `ends.0` is the handshake initiator's, `ends.1` the responder's.
    let ends: (End, End)
    private var lastDelivery: [Double] = [0, 0]

    init(scheduler: SimulatedScheduler, latencySeconds: Double = 0.001) {
        self.scheduler = scheduler
        self.latencySeconds = latencySeconds
        ends = (End(side: 0), End(side: 1))
        ends.0.pipe = self
        ends.1.pipe = self
    }

    private func end(_ side: Int) -> End { side == 0 ? ends.0 : ends.1 }

    /// Delivers after the latency, never before the previous message in the same direction.
    private func later(from side: Int, _ work: @escaping @Sendable () -> Void) {
        let time = max(scheduler.now + latencySeconds, lastDelivery[side])
        lastDelivery[side] = time
        scheduler.schedule(after: time - scheduler.now, work)
    }

    fileprivate func carry(_ bytes: [UInt8], from side: Int) {
        let receiver = end(1 - side)
        later(from: side) {
            do throws(ProtocolError) {
                receiver.deliver(.message(try ConnectionMessage.decode(bytes)))
            } catch {
                receiver.deliver(.violation(error))
            }
        }
    }

    fileprivate func close(from side: Int) {
        end(side).deliver(.closed(.localClosed))
        let other = end(1 - side)
        later(from: side) { other.deliver(.closed(.peerClosed)) }
    }
}
