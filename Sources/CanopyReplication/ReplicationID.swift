import CanopyCore

/// The id of one replication, which names its checkpoints on both sides: a digest of the source
/// and target database ids and the filter, as CouchDB derives its replication id. A database
/// made anew gets a new database id, so its replications start from zero, as they must.
package enum ReplicationIdentity {
    /// 16 bytes identifying the replication from `source` to `target` with `filter`.
    public static func replicationID(source: [UInt8], target: [UInt8], filter: ReplicationFilter) -> [UInt8] {
        var input: [UInt8] = Array("canopy-replication-v1".utf8)
        input.append(UInt8(source.count))
        input.append(contentsOf: source)
        input.append(UInt8(target.count))
        input.append(contentsOf: target)
        input.append(contentsOf: filter.identity.utf8)
        return Blake2b.hash(input, outputBytes: 16)
    }

    /// The local-document id under which a replication's checkpoint is stored: this node's own,
    /// for its pulls, and, before copies were kept per peer, the copies kept for peers.
    public static func checkpointDocumentID(_ replicationID: [UInt8]) -> String {
        "checkpoint/" + Hex.encode(replicationID)
    }

    /// The start of every local-document id under which a copy of a peer's checkpoint is kept.
    package static let peerCheckpointPrefix = "peer-checkpoint/"

    /// The start of the ids of the copies kept for the peer named `peer` (its horizon key,
    /// `ReplicationConfiguration.peerHorizonKey`): a peer reads and writes only its own, and
    /// they are bounded and forgotten per peer.
    package static func peerCheckpointPrefix(peer: String) -> String {
        peerCheckpointPrefix + peer + "/"
    }

    /// The local-document id of the copy of `peer`'s checkpoint for `replicationID`.
    package static func peerCheckpointDocumentID(peer: String, _ replicationID: [UInt8]) -> String {
        peerCheckpointPrefix(peer: peer) + Hex.encode(replicationID)
    }

    /// The peer a copy's id (`peerCheckpointDocumentID`) was kept for; nil for another id.
    package static func peer(ofCheckpointDocument id: String) -> String? {
        guard id.hasPrefix(peerCheckpointPrefix), let slash = id.lastIndex(of: "/") else { return nil }
        let peer = id[id.index(id.startIndex, offsetBy: peerCheckpointPrefix.count)..<slash]
        return peer.isEmpty ? nil : String(peer)
    }
}
