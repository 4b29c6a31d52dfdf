import CanopyCrypto
import CanopyReplication
import CanopyWire
import DequeModule

/// What a `SimulatedLink` hands to one of its ends: the bytes of a message that arrived in
/// order, or the connection's end. An end decodes the bytes with its protocol's codec.
protocol SimulatedLinkEnd: AnyObject, Sendable {
    /// A message's wire bytes arrived.
    func receive(_ bytes: [UInt8])
    /// The connection closed; nothing follows.
    func receiveClosed(_ reason: TransportCloseReason)
}

/// One simulated connection between two nodes: a pair of `ConnectionTransport` ends (protocol
/// version 2, `makeConnectionEnds`).
///
/// Data model, per direction (0: dialler → listener, 1: listener → dialler):
///
///     queue        items sent and not yet delivered, in send order; each has a ready time no
///                  earlier than the one before it (a byte stream is in order)
///     item         a message's wire bytes or the sender's close, with the link sequence number
///                  the sender gave it
///     expected     the sequence number the receiver accepts next
///
/// A loss, duplicate or reorder shows up at the receiver as a sequence number other than
/// `expected`; the receiver then closes with `.failed`, as Canopy's secretstream channel does when
/// a frame fails to decrypt. Messages are encoded with the real codec on send and decoded on
/// delivery.
final class SimulatedLink: @unchecked Sendable {
    private enum Payload {
        case message([UInt8])
        case close(TransportCloseReason)
    }

    private struct Item {
        var payload: Payload
        var sequence: UInt64
        let readyTime: Double
    }

    private struct Direction {
        var queue: Deque<Item> = []
        var nextSequence: UInt64 = 0
        var expected: UInt64 = 0
        var lastReady: Double = 0
        var flushScheduled = false
    }

    unowned let network: SimulatedNetwork
    /// The node indices: `nodes.0` dialled `nodes.1`.
    let nodes: (Int, Int)
    /// What both ends know of the connection after the handshake (initiator, responder and
    /// transcript hash), for the simultaneous-connect rule.
    let connection: SimultaneousConnect.Connection
    private weak var end0: (any SimulatedLinkEnd)?
    private weak var end1: (any SimulatedLinkEnd)?
    private var directions = [Direction(), Direction()]
    private(set) var isSevered = false

    init(network: SimulatedNetwork, nodes: (Int, Int), connection: SimultaneousConnect.Connection) {
        self.network = network
        self.nodes = nodes
        self.connection = connection
    }

    /// Makes two ends that speak protocol version 2 (`ConnectionTransport`).
    func makeConnectionEnds() -> (SimulatedConnectionEnd, SimulatedConnectionEnd) {
        let ends = (SimulatedConnectionEnd(link: self, side: 0), SimulatedConnectionEnd(link: self, side: 1))
        end0 = ends.0
        end1 = ends.1
        return ends
    }

    private func end(_ side: Int) -> (any SimulatedLinkEnd)? { side == 0 ? end0 : end1 }
    func node(_ side: Int) -> Int { side == 0 ? nodes.0 : nodes.1 }

    // MARK: Sending

    /// Carries a message's `bytes` (counted by the caller) from `side`, with the network's
    /// in-connection faults; `isRevisions` exposes it to a reset mid-batch, `label` names it in
    /// fault records.
    func send(_ bytes: [UInt8], isRevisions: Bool, label: String, from side: Int) {
        guard !isSevered else { return }
        let (from, to) = (node(side), node(1 - side))
        let rates = network.rates
        if isRevisions, rates.resetDuringRevisions > 0, network.random.nextUnit() < rates.resetDuringRevisions {
            network.count(fault: "resetMidBatch", "n\(from)->n\(to)")
            reset(reason: "connection reset mid-batch")
            return
        }
        let sequence = directions[side].nextSequence
        directions[side].nextSequence += 1
        guard rates.streamCorruption > 0, network.random.nextUnit() < rates.streamCorruption else {
            enqueue(.message(bytes), sequence: sequence, direction: side)
            return
        }
        switch network.random.next() % 3 {
        case 0:
            network.count(fault: "loss", "n\(from)->n\(to) \(label)")
        case 1:
            network.count(fault: "duplicate", "n\(from)->n\(to) \(label)")
            enqueue(.message(bytes), sequence: sequence, direction: side)
            enqueue(.message(bytes), sequence: sequence, direction: side)
        default:
            network.count(fault: "reorder", "n\(from)->n\(to) \(label)")
            enqueue(.message(bytes), sequence: sequence, direction: side)
            swapLastTwo(direction: side)
        }
    }

    func close(from side: Int, reason: TransportCloseReason) {
        end(side)?.receiveClosed(reason == .localClosed ? .localClosed : reason)
        guard !isSevered else { return }
        let sequence = directions[side].nextSequence
        directions[side].nextSequence += 1
        enqueue(.close(reason), sequence: sequence, direction: side)
    }

    private func enqueue(_ payload: Payload, sequence: UInt64, direction side: Int) {
        let jitter = network.jitterSeconds > 0 ? network.random.nextUnit() * network.jitterSeconds : 0
        let ready = max(network.base.now + network.latencySeconds + jitter, directions[side].lastReady)
        directions[side].lastReady = ready
        directions[side].queue.append(Item(payload: payload, sequence: sequence, readyTime: ready))
        scheduleFlush(side, after: ready - network.base.now)
    }

    /// Swaps the payloads of the last two items (their ready times stay in order).
    private func swapLastTwo(direction side: Int) {
        let count = directions[side].queue.count
        guard count >= 2 else { return }
        let last = directions[side].queue[count - 1]
        let previous = directions[side].queue[count - 2]
        directions[side].queue[count - 1].payload = previous.payload
        directions[side].queue[count - 1].sequence = previous.sequence
        directions[side].queue[count - 2].payload = last.payload
        directions[side].queue[count - 2].sequence = last.sequence
    }

    // MARK: Delivering

    /// Schedules delivery of what is due in `side`'s direction, on the receiver's scheduler (so a
    /// paused receiver holds it and a crashed one drops it).
    func scheduleFlush(_ side: Int, after seconds: Double) {
        guard !directions[side].flushScheduled, !isSevered else { return }
        directions[side].flushScheduled = true
        network.schedulers[node(1 - side)].schedule(after: seconds) { [self] in
            directions[side].flushScheduled = false
            flush(side)
        }
    }

    private func flush(_ side: Int) {
        let (from, to) = (node(side), node(1 - side))
        guard let hold = network.holdSeconds(from: from, to: to) else {
            network.stall(self, side)
            return
        }
        if hold > 0 { return scheduleFlush(side, after: hold) }
        let now = network.base.now
        while !isSevered, let head = directions[side].queue.first, head.readyTime <= now {
            directions[side].queue.removeFirst()
            deliver(head, direction: side)
        }
        if !isSevered, let head = directions[side].queue.first {
            scheduleFlush(side, after: head.readyTime - now)
        }
    }

    private func deliver(_ item: Item, direction side: Int) {
        let receiver = end(1 - side)
        guard item.sequence == directions[side].expected else {
            let detail = "decryption failed: frame \(item.sequence), expected \(directions[side].expected)"
            receiver?.receiveClosed(.failed(detail))
            // The receiver drops the TCP connection; the sender sees it after one delay.
            sever(notifying: side, reason: "connection closed by peer after a decryption failure")
            return
        }
        directions[side].expected += 1
        switch item.payload {
        case .message(let bytes):
            receiver?.receive(bytes)
        case .close(let reason):
            receiver?.receiveClosed(reason == .localClosed ? .peerClosed : .failed("peer closed: \(reason)"))
            // Both ends are closed now: the closer at once, the receiver just now.
            isSevered = true
        }
    }

    /// Severs the link after a failure seen by one side: the other `side` learns of it one delay
    /// later (unless its traffic is held, in which case it learns when its own heartbeat fails).
    private func sever(notifying side: Int, reason: String) {
        isSevered = true
        let other = end(side)
        network.schedulers[node(side)].schedule(after: network.latencySeconds) {
            other?.receiveClosed(.failed(reason))
        }
    }

    /// Resets the connection: undelivered messages are lost; both ends see a failure.
    func reset(reason: String) {
        guard !isSevered else { return }
        isSevered = true
        for side in 0..<2 {
            let receiver = end(side)
            network.schedulers[node(side)].execute { receiver?.receiveClosed(.failed(reason)) }
        }
    }
}
