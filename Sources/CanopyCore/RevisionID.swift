/// A revision id, `N-H`: the generation `N` (1 for a new document, parent + 1 after) and `H`, the
/// 128-bit BLAKE2b digest of the revision's canonical form (see `RevisionHasher`), printed as 32
/// lowercase hex characters.
///
/// Ordering is CouchDB's: generation numerically, then the digest byte-wise. Because the digest is
/// held as two big-endian 64-bit halves, comparing the halves as integers is the same as comparing
/// the hex text byte by byte, with no allocation.
public struct RevisionID: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The generation, in `1...generationMax`.
    public let generation: Int
    /// The first 8 bytes of the digest, big-endian.
    public let digestHigh: UInt64
    /// The last 8 bytes of the digest, big-endian.
    public let digestLow: UInt64

    /// The largest generation Canopy accepts (also the wire limit; a varint never exceeds it).
    public static let generationMax = Int(UInt32.max)
    /// Bytes of the binary digest.
    public static let digestBytes = 16

    /// Creates a revision id from its parts. `generation` must be in `1...generationMax`.
    public init(generation: Int, digestHigh: UInt64, digestLow: UInt64) {
        precondition((1...RevisionID.generationMax).contains(generation), "generation out of range")
        self.generation = generation
        self.digestHigh = digestHigh
        self.digestLow = digestLow
    }

    /// Creates a revision id from a generation and 16 digest bytes. `@inlinable` so that callers
    /// (the store's row decoding, the wire codec) get a specialised loop: this is on the hot path
    /// of every revision read.
    @inlinable
    public init?<Bytes: Collection<UInt8>>(generation: Int, digest: Bytes) {
        guard (1...RevisionID.generationMax).contains(generation), digest.count == 16 else {
            return nil
        }
        var high: UInt64 = 0
        var low: UInt64 = 0
        var index = digest.startIndex
        for _ in 0..<8 {
            high = high << 8 | UInt64(digest[index])
            index = digest.index(after: index)
        }
        for _ in 0..<8 {
            low = low << 8 | UInt64(digest[index])
            index = digest.index(after: index)
        }
        self.init(generation: generation, digestHigh: high, digestLow: low)
    }

    /// Parses `N-H`: `N` a decimal generation without leading zeros, `H` exactly 32 lowercase
    /// hex characters. Returns nil for anything else.
    public init?(_ text: some StringProtocol) {
        let utf8 = Array(text.utf8)
        guard let dash = utf8.firstIndex(of: UInt8(ascii: "-")), dash > 0,
            dash <= 10, utf8.count == dash + 33
        else { return nil }
        if utf8[0] == UInt8(ascii: "0") { return nil }
        var generation = 0
        for byte in utf8[..<dash] {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            generation = generation * 10 + Int(byte - UInt8(ascii: "0"))
        }
        var halves: [UInt64] = [0, 0]
        for (offset, byte) in utf8[(dash + 1)...].enumerated() {
            let nibble: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = byte - UInt8(ascii: "a") + 10
            default: return nil
            }
            halves[offset / 16] = halves[offset / 16] << 4 | UInt64(nibble)
        }
        guard (1...RevisionID.generationMax).contains(generation) else { return nil }
        self.init(generation: generation, digestHigh: halves[0], digestLow: halves[1])
    }

    /// The 16 digest bytes, big-endian.
    public var digest: [UInt8] {
        var bytes = [UInt8]()
        bytes.reserveCapacity(16)
        for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: digestHigh >> UInt64(shift))) }
        for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: digestLow >> UInt64(shift))) }
        return bytes
    }

    /// The digest as 32 lowercase hex characters.
    public var digestHex: String { Hex.encode(digest) }

    /// `N-H`.
    public var description: String { "\(generation)-\(digestHex)" }

    /// CouchDB order: generation, then digest bytes.
    public static func < (lhs: RevisionID, rhs: RevisionID) -> Bool {
        if lhs.generation != rhs.generation { return lhs.generation < rhs.generation }
        if lhs.digestHigh != rhs.digestHigh { return lhs.digestHigh < rhs.digestHigh }
        return lhs.digestLow < rhs.digestLow
    }
}

extension RevisionID: Codable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let parsed = RevisionID(text) else {
            throw DecodingError.dataCorruptedError(
                in: container, debugDescription: "malformed revision id \"\(text.prefix(80))\"")
        }
        self = parsed
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
