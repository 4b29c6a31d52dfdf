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

    /// The local-document id under which a replication's checkpoint is stored.
    public static func checkpointDocumentID(_ replicationID: [UInt8]) -> String {
        "checkpoint/" + Hex.encode(replicationID)
    }
}
