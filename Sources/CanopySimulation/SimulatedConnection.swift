import CanopyReplication
import CanopyWire

/// One end of a simulated connection that speaks protocol version 2 (`Protocol/replication-v2.md`):
/// a `ConnectionTransport` over a `SimulatedLink`, for a `ChannelMux`.
///
/// Every message is encoded to its wire bytes on send and decoded with `ConnectionMessage.decode`
/// on delivery (bytes that do not decode arrive as `.violation`), and travels with the link's
/// faults: latency and jitter, partitions and clogs that hold it, losses, duplicates and
/// reorders that the receiver sees as a decryption failure closing the connection, and resets
/// (a channel's `revisions` message may reset the whole connection, as in version 1).
final class SimulatedConnectionEnd: ConnectionTransport, SimulatedLinkEnd, @unchecked Sendable {
    /// Strong: the mux owns its end, the end keeps the link (the link holds its ends weakly).
    let link: SimulatedLink
    let side: Int
    private let inbox = TransportInbox<ConnectionEvent>()

    init(link: SimulatedLink, side: Int) {
        self.link = link
        self.side = side
    }

    /// The node at this end.
    var node: Int { link.node(side) }

    func start(_ handler: @escaping @Sendable (ConnectionEvent) -> Void) { inbox.start(handler) }

    func send(_ message: ConnectionMessage) {
        guard !inbox.isClosed, !link.isSevered else { return }
        let bytes = message.encoded()
        link.network.noteSent(message, bytes: bytes.count, from: link.node(side), to: link.node(1 - side))
        var isRevisions = false
        if case .channel(_, let inner) = message { isRevisions = inner.type == .revisions }
        link.send(bytes, isRevisions: isRevisions, label: message.name, from: side)
    }

    func close(_ reason: TransportCloseReason) {
        guard !inbox.isClosed else { return }
        link.close(from: side, reason: reason)
    }

    func receive(_ bytes: [UInt8]) {
        do throws(ProtocolError) {
            deliver(.message(try ConnectionMessage.decode(bytes)))
        } catch {
            deliver(.violation(error))
        }
    }

    func receiveClosed(_ reason: TransportCloseReason) { deliver(.closed(reason)) }

    private func deliver(_ event: ConnectionEvent) {
        var closes = false
        if case .closed = event { closes = true }
        inbox.deliver(event, closes: closes)
    }
}
