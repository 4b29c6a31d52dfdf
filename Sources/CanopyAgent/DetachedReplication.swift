import CanopyReplication
import Foundation

/// The replication controller the agent uses until the replication engine is plugged in with
/// `Agent.setReplicationController`: it reports every configured peer as `stopped` and refuses
/// `sync` with `unavailable`, so nothing claims to replicate when it does not.
final class DetachedReplication: ReplicationController, @unchecked Sendable {
    private let lock = NSLock()
    private var peers: [PeerConfig] = []

    func statuses(_ completion: @escaping @Sendable ([PeerReplicationStatus]) -> Void) {
        let peers = lock.withLock { self.peers }
        completion(peers.sorted { $0.nodeID < $1.nodeID }.map {
            PeerReplicationStatus(nodeID: $0.nodeID, connected: false, state: .stopped)
        })
    }

    func sync(
        peer nodeID: String, progress: @escaping @Sendable (ReplicationProgress) -> Void,
        completion: @escaping @Sendable (Result<ReplicationProgress, ReplicationFailure>) -> Void
    ) {
        let known = lock.withLock { peers.contains { $0.nodeID == nodeID } }
        guard known else {
            return completion(.failure(ReplicationFailure(code: "unknown_peer", message: "\(nodeID) is not a configured peer")))
        }
        completion(.failure(ReplicationFailure(
            code: "unavailable", message: "this agent has no replication engine connected yet")))
    }

    func apply(config: AgentConfig) {
        lock.withLock { peers = config.peers }
    }

    func connectionEstablished(peer nodeID: String, transport: any PeerTransport) {
        transport.close()
    }

    func shutdown(_ completion: @escaping @Sendable () -> Void) {
        completion()
    }
}
