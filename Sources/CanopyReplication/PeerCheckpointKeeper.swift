import CanopyCore
import CanopyStore
import CanopyWire

/// The copies of the peer's checkpoints that this node keeps for it (`checkpointGet`,
/// `checkpointSet`, `Protocol/replication-v1.md` §6.8), stored as local documents, and the
/// peer horizon a stored copy implies (`DocumentStore.recordPeerHorizon`).
///
/// With a peer key (every `PeerReplicator` has one) the copies are kept under the peer's own
/// ids (`ReplicationIdentity.peerCheckpointDocumentID`), at most `checkpointsMax` of them per
/// peer in each database: any allowed peer, a read-only one too, may send `checkpointSet`, and
/// one that sent 5,000 replication ids stored 5,000 records that outlived its removal. The one
/// written longest ago makes room for a new one. A copy kept before copies were kept per peer
/// (under `ReplicationIdentity.checkpointDocumentID`) is still read when the peer has none of
/// its own, so a pull resumes across the change. Without a key (a bare session), the copies
/// are kept as they were, unbounded.
struct PeerCheckpointKeeper {
    let store: any ReplicationStore
    /// The name the peer's horizon is recorded under (nil: the replication id in hex), and its
    /// copies' ids start with.
    let peerHorizonKey: String?
    /// The most copies kept for the peer in this database.
    var checkpointsMax = ReplicationConfiguration.peerCheckpointsMaxDefault

    /// The answer to the peer's `checkpointGet`: its stored copy, or none.
    func answer(_ get: CheckpointGet) throws(ReplicationError) -> Message {
        var value: JSONValue?
        do {
            if let peer = peerHorizonKey {
                value = try store.localGet(ReplicationIdentity.peerCheckpointDocumentID(peer: peer, get.replicationID))
            }
            if value == nil { value = try store.localGet(ReplicationIdentity.checkpointDocumentID(get.replicationID)) }
        } catch { throw .store(error) }
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
            if let peer = peerHorizonKey {
                try store.localPut(
                    ReplicationIdentity.peerCheckpointDocumentID(peer: peer, set.replicationID), body: checkpoint.json,
                    keepingAtMost: checkpointsMax, withPrefix: ReplicationIdentity.peerCheckpointPrefix(peer: peer))
            } else {
                try store.localPut(ReplicationIdentity.checkpointDocumentID(set.replicationID), body: checkpoint.json)
            }
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
