import CanopyCore
import CanopyCrypto
import CanopyReplication
import CanopyWire

/// How often the network misbehaves inside a connection, per message sent.
public struct NetworkFaultRates: Sendable, Equatable {
    /// Probability that a message is lost, duplicated or reordered on its way. Over Canopy's
    /// encrypted channel each of these is a decryption failure that closes the connection.
    public var streamCorruption: Double
    /// Probability that a `revisions` message resets the connection instead of arriving (a
    /// connection reset mid-batch).
    public var resetDuringRevisions: Double

    /// Creates rates.
    public init(streamCorruption: Double, resetDuringRevisions: Double) {
        self.streamCorruption = streamCorruption
        self.resetDuringRevisions = resetDuringRevisions
    }

    /// A perfect network.
    public static let none = NetworkFaultRates(streamCorruption: 0, resetDuringRevisions: 0)
}

/// The network between simulated nodes, as the replication engine would see it over encrypted
/// TCP: connections (`SimulatedLink`) carry real wire-encoded messages with per-link delay and
/// jitter, in order; the network can partition node pairs (one way or both), clog a direction
/// (hold its traffic for a while), corrupt a connection's stream, reset connections, and take
/// nodes down.
///
/// Model of a partition: new connections time out, and established connections stall (TCP keeps
/// retransmitting): messages in a blocked direction are held, in order, and flow again when the
/// partition heals, unless a side gives up first (dead-peer timeout) and closes.
///
/// Every random decision draws from `random`, in scheduler order, so a run replays exactly.
public final class SimulatedNetwork: @unchecked Sendable {
    /// Seconds a dial to an unreachable node takes to fail.
    public static let connectTimeoutSeconds = 5.0

    let base: SimulatedScheduler
    let random: SeededRandom
    let trace: SimulationTrace
    /// One-way delay of every link.
    public var latencySeconds: Double
    /// Extra delay, uniform in [0, jitter), per message (delivery stays in order).
    public var jitterSeconds: Double
    /// In-connection faults.
    public var rates: NetworkFaultRates
    /// Each node's scheduler, by node index.
    public let schedulers: [NodeScheduler]
    /// Each node's node id (its public key), by node index: a connection's initiator and
    /// responder for the simultaneous-connect rule.
    public let nodeIDs: [NodeID]
    private var nodeUp: [Bool]
    /// `blocked[from][to]`: traffic from `from` to `to` is partitioned.
    private var blocked: [[Bool]]
    /// `clogUntil[from][to]`: traffic from `from` to `to` is held until this time.
    private var clogUntil: [[Double]]
    /// Open links, in creation order (so cutting them is deterministic).
    private var links: [SimulatedLink] = []
    /// Directions that stalled on a partition and must be flushed when it heals.
    private var stalled: [(SimulatedLink, Int)] = []

    /// Messages sent, by type.
    public private(set) var messagesByType: [MessageType: Int] = [:]
    /// Wire bytes sent (message bytes, before framing and encryption).
    public private(set) var bytesSent = 0
    /// Revisions carried by `revisions` messages.
    public private(set) var revisionsSent = 0
    /// Injected faults, by name.
    public private(set) var faults: [String: Int] = [:]

    /// A network of `nodeCount` nodes on `base`.
    public init(nodeIDs: [NodeID], base: SimulatedScheduler, random: SeededRandom, trace: SimulationTrace,
                latencySeconds: Double, jitterSeconds: Double, rates: NetworkFaultRates) {
        let nodeCount = nodeIDs.count
        self.nodeIDs = nodeIDs
        self.base = base
        self.random = random
        self.trace = trace
        self.latencySeconds = latencySeconds
        self.jitterSeconds = jitterSeconds
        self.rates = rates
        schedulers = (0..<nodeCount).map { _ in NodeScheduler(base: base) }
        nodeUp = Array(repeating: true, count: nodeCount)
        blocked = Array(repeating: Array(repeating: false, count: nodeCount), count: nodeCount)
        clogUntil = Array(repeating: Array(repeating: 0, count: nodeCount), count: nodeCount)
    }

    /// Messages of protocol version 2's connection layer sent (hello, heartbeats, attach,
    /// detach, close: everything but a channel's messages, which `messagesByType` counts).
    public private(set) var connectionMessages = 0

    /// Total messages sent.
    public var messagesSent: Int { messagesByType.values.reduce(0, +) + connectionMessages }

    /// Counts a fault and records it in the trace.
    func count(fault name: String, _ detail: String) {
        faults[name, default: 0] += 1
        trace.record("fault \(name) \(detail)")
    }

    // MARK: Dialling

    /// Opens a connection from `from` to `to`. When it succeeds, `accept` runs on `to`'s
    /// scheduler with the listener's end, then `completion` on `from`'s with the dialler's end.
    /// Each connection gets a transcript hash drawn from the network's stream (in the agent, the
    /// handshake's `T4`: unique per connection, known to both ends, chosen by neither).
    func dial(from: Int, to: Int, accept: @escaping @Sendable (SimulatedConnectionEnd) -> Void,
              completion: @escaping @Sendable (Result<SimulatedConnectionEnd, ReplicationError>) -> Void) {
        let dialer = schedulers[from]
        if blocked[from][to] || blocked[to][from] {
            count(fault: "dialTimeout", "n\(from)->n\(to)")
            dialer.schedule(after: Self.connectTimeoutSeconds) { completion(.failure(.disconnected("connect timed out"))) }
            return
        }
        guard nodeUp[to] else {
            dialer.schedule(after: 2 * latencySeconds) { completion(.failure(.disconnected("connection refused"))) }
            return
        }
        // SYN, SYN-ACK, then the three handshake messages: about three one-way delays.
        var transcriptHash: [UInt8] = []
        for _ in 0..<4 { withUnsafeBytes(of: random.next().bigEndian) { transcriptHash.append(contentsOf: $0) } }
        let connection = SimultaneousConnect.Connection(initiator: nodeIDs[from], responder: nodeIDs[to], transcriptHash: transcriptHash)
        let link = SimulatedLink(network: self, nodes: (from, to), connection: connection)
        links.removeAll { $0.isSevered }
        links.append(link)
        let (dialled, listening) = link.makeConnectionEnds()
        trace.record("connect n\(from)->n\(to)")
        schedulers[to].schedule(after: 2 * latencySeconds) { accept(listening) }
        dialer.schedule(after: 3 * latencySeconds) { completion(.success(dialled)) }
    }

    // MARK: Node and link faults

    /// The faults of a link between two neighbours.
    enum LinkFault: CaseIterable {
        /// Both ways, for 1–20 s.
        case partition
        /// One way, for 1–20 s.
        case oneWayPartition
        /// One direction holds its traffic for 1–8 s.
        case clog
        /// A random open connection resets.
        case reset
    }

    /// Injects `fault` on the link from `from` to `to`, lasting `fraction` of the fault's range.
    func inject(_ fault: LinkFault, from: Int, to: Int, fraction: Double) {
        switch fault {
        case .partition, .oneWayPartition:
            let seconds = 1 + 19 * fraction
            count(fault: fault == .partition ? "partition" : "oneWayPartition", "n\(from)-n\(to) \(Int(seconds))s")
            partition(from: from, to: to)
            if fault == .partition { partition(from: to, to: from) }
            base.schedule(after: seconds) { [weak self] in
                self?.unpartition(from: from, to: to)
                if fault == .partition { self?.unpartition(from: to, to: from) }
            }
        case .clog:
            let seconds = 1 + 7 * fraction
            count(fault: "clog", "n\(from)->n\(to) \(Int(seconds))s")
            clog(from: from, to: to, seconds: seconds)
        case .reset:
            resetRandomLink()
        }
    }

    /// Takes `node` down: every connection it had resets (its peers see the reset), and dials
    /// to it are refused until `bringUp`.
    func takeDown(_ node: Int) {
        nodeUp[node] = false
        for link in links where link.nodes.0 == node || link.nodes.1 == node {
            link.reset(reason: "connection reset (n\(node) crashed)")
        }
    }

    /// Lets `node` accept connections again.
    func bringUp(_ node: Int) {
        nodeUp[node] = true
    }

    /// Whether `node` is up.
    func isUp(_ node: Int) -> Bool { nodeUp[node] }

    /// Partitions traffic from `from` to `to` (call twice for a symmetric partition).
    func partition(from: Int, to: Int) {
        blocked[from][to] = true
    }

    /// Holds traffic from `from` to `to` until `seconds` from now.
    func clog(from: Int, to: Int, seconds: Double) {
        clogUntil[from][to] = max(clogUntil[from][to], base.now + seconds)
    }

    /// Ends the partition from `from` to `to` and lets its stalled traffic flow.
    func unpartition(from: Int, to: Int) {
        blocked[from][to] = false
        let directions = stalled
        stalled = []
        for (link, direction) in directions { link.scheduleFlush(direction, after: 0) }
    }

    /// Removes every partition and clog, and lets stalled traffic flow.
    func healAll() {
        for from in blocked.indices {
            for to in blocked.indices {
                blocked[from][to] = false
                clogUntil[from][to] = 0
            }
        }
        let directions = stalled
        stalled = []
        for (link, direction) in directions { link.scheduleFlush(direction, after: 0) }
    }

    /// Resets one random open connection (if any), as a middlebox or a peer's crash would.
    func resetRandomLink() {
        links.removeAll { $0.isSevered }
        guard !links.isEmpty else { return }
        let link = links[Int(random.nextUnit() * Double(links.count))]
        count(fault: "connectionReset", "n\(link.nodes.0)<->n\(link.nodes.1)")
        link.reset(reason: "connection reset")
    }

    /// How long traffic from `from` to `to` is held from now: 0 when it may flow, nil when it
    /// is partitioned (held until healed).
    func holdSeconds(from: Int, to: Int) -> Double? {
        if blocked[from][to] { return nil }
        return max(0, clogUntil[from][to] - base.now)
    }

    /// Remembers a direction held by a partition, to flush when the partition ends.
    func stall(_ link: SimulatedLink, _ direction: Int) {
        if !stalled.contains(where: { $0.0 === link && $0.1 == direction }) { stalled.append((link, direction)) }
    }

    /// Counts a sent message of protocol version 2 and records it in the trace: a channel's
    /// message as `noteSent(_:bytes:from:to:)` does, with its channel; the connection's own
    /// messages by name.
    func noteSent(_ message: ConnectionMessage, bytes: Int, from: Int, to: Int) {
        guard case .channel(let channel, let inner) = message else {
            connectionMessages += 1
            bytesSent += bytes
            trace.record("send n\(from)->n\(to) \(message.name) \(bytes)B")
            return
        }
        noteSent(inner, bytes: bytes, from: from, to: to, channel: " ch\(channel)")
    }

    /// Counts a sent message and records it in the trace (type and size are hashed; for the
    /// traced document, a `changes` entry's sequence and leaves are shown too).
    func noteSent(_ message: Message, bytes: Int, from: Int, to: Int, channel: String = "") {
        messagesByType[message.type, default: 0] += 1
        bytesSent += bytes
        var documents: [String] = []
        var detail = ""
        if case .revisions(let revisions) = message { revisionsSent += revisions.revisions.count }
        if case .changes(let changes) = message {
            documents = changes.entries.map(\.docID)
            if let traced = trace.document, let entry = changes.entries.first(where: { $0.docID == traced }) {
                detail = " \(traced) seq \(entry.sequence) leaves \(entry.revisions.map { "\($0.id)" }.joined(separator: ","))"
            }
        }
        trace.record("send n\(from)->n\(to)\(channel) \(message.type) \(bytes)B", documents: documents, detail: detail)
    }
}
