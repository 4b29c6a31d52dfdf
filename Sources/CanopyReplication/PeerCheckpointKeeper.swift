import CanopyCore
import CanopyStore
import CanopyWire

/// The copies of the peer's checkpoints that this node keeps for it (`checkpointGet`,
/// `checkpointSet`, `Protocol/replication-v1.md` §6.8), stored as local documents, and the
/// peer horizon a stored copy implies (`DocumentStore.recordPeerHorizon`).
struct PeerCheckpointKeeper {
    let store: any ReplicationStore
    /// The name the peer's horizon is recorded under (nil: the replication id in hex).
    let peerHorizonKey: String?

    /// The answer to the peer's `checkpointGet`: its stored copy, or none.
    func answer(_ get: CheckpointGet) throws(ReplicationError) -> Message {
        let value: JSONValue?
        do { value = try store.localGet(ReplicationIdentity.checkpointDocumentID(get.replicationID)) } catch { throw .store(error) }
        let checkpoint = ReplicationCheckpoint(json: value)
        return .checkpoint(Checkpoint(requestID: get.requestID, value: checkpoint?.encoded()))
    }

    /// Stores the peer's `checkpointSet` and answers it. The peer's checkpoint is its claim of
    /// how far it holds our changes; the horizon recorded is capped by `acknowledged`, what this
    /// session saw the peer acknowledge, so a peer cannot make this node stem what it never
    /// received (nothing is recorded when it acknowledged nothing).
    func store(_ set: CheckpointSet, acknowledged: UInt64?) throws(ReplicationError) -> Message {
        guard let checkpoint = ReplicationCheckpoint(encoded: set.value) else {
            return .error(ErrorMessage(requestID: set.requestID, code: .invalidDocument, message: "checkpoint value is not a Canopy checkpoint"))
        }
        do {
            try store.localPut(ReplicationIdentity.checkpointDocumentID(set.replicationID), body: checkpoint.json)
            if let acknowledged {
                let peer = peerHorizonKey ?? Hex.encode(set.replicationID)
                try store.recordPeerHorizon(peer: peer, sequence: Int64(clamping: min(checkpoint.current.sequence, acknowledged)))
            }
        } catch { throw .store(error) }
        return .checkpointSetAck(CheckpointSetAck(requestID: set.requestID))
    }
}
