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

    /// A peer horizon to record (`DocumentStore.recordPeerHorizon`).
    struct Horizon: Equatable {
        let peer: String
        let sequence: Int64
    }

    /// Stores the peer's `checkpointSet` and answers it, with the peer horizon it implies. The
    /// peer's checkpoint is its claim of how far it holds our changes; the horizon is capped by
    /// `acknowledged`, what this session saw the peer acknowledge, so a peer cannot make this node
    /// stem what it never received (no horizon when it acknowledged nothing). The session records
    /// the horizon when `PeerHorizonBarrier` lets it (`record`).
    func store(_ set: CheckpointSet, acknowledged: UInt64?) throws(ReplicationError) -> (answer: Message, horizon: Horizon?) {
        guard let checkpoint = ReplicationCheckpoint(encoded: set.value) else {
            let refusal = ErrorMessage(requestID: set.requestID, code: .invalidDocument, message: "checkpoint value is not a Canopy checkpoint")
            return (.error(refusal), nil)
        }
        do {
            try store.localPut(ReplicationIdentity.checkpointDocumentID(set.replicationID), body: checkpoint.json)
        } catch { throw .store(error) }
        let horizon = acknowledged.map {
            Horizon(peer: peerHorizonKey ?? Hex.encode(set.replicationID), sequence: Int64(clamping: min(checkpoint.current.sequence, $0)))
        }
        return (.checkpointSetAck(CheckpointSetAck(requestID: set.requestID)), horizon)
    }

    /// Records a horizon `store` returned.
    func record(_ horizon: Horizon) throws(ReplicationError) {
        do { try store.recordPeerHorizon(peer: horizon.peer, sequence: horizon.sequence) } catch { throw .store(error) }
    }
}
