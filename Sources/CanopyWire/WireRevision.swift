import CanopyCore

/// A leaf revision as `changes` lists it: the id and its `RevisionKind`. On the wire it is
/// `varint(generation × 8 + kind) ‖ 16-byte digest` (§1): folding the kind into the generation's
/// varint costs nothing for generations below 16 and saves a byte on every other one.
public struct LeafRevision: Hashable, Sendable {
    public var id: RevisionID
    public var kind: RevisionKind

    public init(id: RevisionID, kind: RevisionKind) {
        self.id = id
        self.kind = kind
    }
}

/// The 16-byte digest of a revision without its generation: how ancestry travels, since the
/// generations of an ancestry are consecutive and implied (§6.6).
public struct RevisionDigest: Hashable, Sendable {
    /// The first 8 digest bytes, big-endian.
    public var high: UInt64
    /// The last 8 digest bytes, big-endian.
    public var low: UInt64

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// The digest of `id`.
    public init(of id: RevisionID) {
        self.init(high: id.digestHigh, low: id.digestLow)
    }

    /// The revision id with this digest at `generation` (1...RevisionID.generationMax).
    public func revisionID(generation: Int) -> RevisionID {
        RevisionID(generation: generation, digestHigh: high, digestLow: low)
    }
}

extension ByteWriter {
    /// Writes 16 digest bytes, big-endian halves.
    mutating func writeDigest(_ digest: RevisionDigest) {
        writeUInt64(digest.high)
        writeUInt64(digest.low)
    }

    /// Writes the 16 digest bytes of `id`.
    mutating func writeDigest(of id: RevisionID) {
        writeDigest(RevisionDigest(of: id))
    }

    /// Writes a `revid`: `varint generation ‖ digest`.
    mutating func writeRevisionID(_ id: RevisionID) {
        writeVarint(UInt64(id.generation))
        writeDigest(of: id)
    }

    /// Writes a `rev`: `varint(generation × 8 + kind) ‖ digest`.
    mutating func writeLeafRevision(_ revision: LeafRevision) {
        writeVarint(UInt64(revision.id.generation) << 3 | UInt64(revision.kind.rawValue))
        writeDigest(of: revision.id)
    }

    private mutating func writeUInt64(_ value: UInt64) {
        withUnsafeBytes(of: value.bigEndian) { writeRaw($0) }
    }
}

extension ByteReader {
    /// Reads 16 digest bytes as two big-endian halves.
    mutating func readDigest(_ field: String) throws(ProtocolError) -> RevisionDigest {
        let (high, low) = try readBigEndianPair(field)
        return RevisionDigest(high: high, low: low)
    }

    /// Reads a `revid`, refusing a generation outside 1...`RevisionID.generationMax`.
    mutating func readRevisionID(_ field: String) throws(ProtocolError) -> RevisionID {
        let generation = try readVarint(field)
        let id = try revisionID(generation: generation, field)
        return id
    }

    /// Reads a `rev`, refusing an invalid generation or kind.
    mutating func readLeafRevision(_ field: String) throws(ProtocolError) -> LeafRevision {
        let key = try readVarint(field)
        guard let kind = RevisionKind(rawValue: UInt8(key & 7)) else {
            throw .invalidRevisionKind(field: field, kind: key & 7)
        }
        return LeafRevision(id: try revisionID(generation: key >> 3, field), kind: kind)
    }

    /// Validates a generation, then reads the digest that follows it.
    private mutating func revisionID(generation: UInt64, _ field: String) throws(ProtocolError) -> RevisionID {
        guard generation >= 1, generation <= UInt64(RevisionID.generationMax) else {
            throw .invalidRevisionGeneration(field: field, generation: generation)
        }
        let digest = try readDigest(field)
        return RevisionID(generation: Int(generation), digestHigh: digest.high, digestLow: digest.low)
    }
}
