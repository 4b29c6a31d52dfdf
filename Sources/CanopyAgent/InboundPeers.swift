import CanopyAdmin
import CanopyCore
import Dispatch

/// What the connection manager reports about inbound peers, as the agent handles it: an allowed
/// peer's authenticated connection goes to the replication controller; a peer that is not in the
/// config is listed as pending, for `peers` to show and `peer accept` to take.
///
/// It is the connection manager's `PeerEventSink` instead of the agent, so that it can be built
/// from the replication controller and the event hub before the agent exists. The manager, which
/// the controller dials through and so is built first, is handed it in
/// `PeerConnectionManager.start`, with the listener: nothing arrives before that.
///
/// Invariants: `pending` is touched only on `queue`, the agent's queue; an accepted connection
/// reaches the controller through `queue`, after every config change the agent applied before it.
final class InboundPeers: PeerEventSink, @unchecked Sendable {
    private let queue: DispatchQueue
    private let events: EventHub
    private let replication: any ReplicationController
    /// Peers refused since the agent started, on `queue`.
    var pending = PendingPeers()

    /// `queue` is the agent's.
    init(queue: DispatchQueue, events: EventHub, replication: any ReplicationController) {
        self.queue = queue
        self.events = events
        self.replication = replication
    }

    func peerRefused(nodeID: String, address: String) {
        queue.async { [self] in pending.record(nodeID: nodeID, address: address, at: Agent.wallClock()) }
        events.emit(Admin.PeerPending(nodeID: nodeID, address: address))
    }

    func peerConnected(nodeID: String, transport: ChannelTransport) {
        // `peer.connected` is emitted by the replication engine once the session is up, for
        // inbound and outbound connections alike.
        queue.async { [self] in replication.accept(inbound: transport, role: transport.role, from: nodeID, connection: transport.identity) }
    }
}

/// The peers that connected with a valid handshake but are not in the config
/// (`Protocol/design.md` §5.2), by node id: at most `AgentLimits.pendingPeersMax`, a newcomer
/// past that is not listed (one already listed is still updated).
struct PendingPeers {
    private var records: [String: PendingPeerRecord] = [:]

    /// Counts a refused connection from `nodeID` at `time`.
    mutating func record(nodeID: String, address: String, at time: Double) {
        var record = records[nodeID] ?? PendingPeerRecord(nodeID: nodeID, address: address, attempts: 0, lastSeen: 0)
        guard records[nodeID] != nil || records.count < AgentLimits.pendingPeersMax else { return }
        record.address = address
        record.attempts += 1
        record.lastSeen = time
        records[nodeID] = record
    }

    /// Whether `nodeID` is listed.
    func contains(_ nodeID: String) -> Bool { records[nodeID] != nil }

    /// Drops the peers now configured: they are no longer pending.
    mutating func remove(_ peers: [PeerConfig]) {
        for peer in peers { records[peer.nodeID] = nil }
    }

    /// The `pending` rows of `peers`, by node id.
    var rows: [Admin.PendingPeer] {
        records.values.sorted { $0.nodeID < $1.nodeID }.map { record in
            Admin.PendingPeer(nodeID: record.nodeID, address: record.address, attempts: Int64(record.attempts), lastSeen: record.lastSeen)
        }
    }
}

/// A peer that connected with a valid handshake but is not in the config (`Protocol/design.md` §5.2).
struct PendingPeerRecord: Sendable, Equatable {
    var nodeID: String
    var address: String
    var attempts: Int
    var lastSeen: Double
}
