/// Computes content-addressed revision ids (`Protocol/design.md` §2.2, `Protocol/replication-v1.md` "Revision
/// ids"). The digest is BLAKE2b with a 16-byte output (`crypto_generichash`, no key) over
///
///     u8 len(parent) ‖ parent as ASCII "N-H" (empty for generation 1) ‖ u8 kind ‖ canonical body
///
/// where `kind` is the `RevisionKind` byte. The same edit made on two nodes therefore gets the same
/// id, and a closing tombstone can never share an id with a user's deletion.
public enum RevisionHasher {
    /// The id of the revision with this parent, kind and canonical body bytes. The bytes before
    /// the body are written on the stack and hashed with the body in place: a receiver hashes
    /// every revision it is sent, and building the input array cost a sixth of the hash.
    public static func revisionID(parent: RevisionID?, kind: RevisionKind, canonicalBody: [UInt8]) -> RevisionID {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: prefixBytesMax) { prefix in
            var count = 1
            if let parent { count = writeText(of: parent, into: prefix, at: 1) }
            prefix[0] = UInt8(count - 1)
            prefix[count] = kind.rawValue
            count += 1
            let digest = canonicalBody.withUnsafeBytes { body in
                Blake2b.digest16(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(prefix)[..<count]), body)
            }
            return RevisionID(generation: (parent?.generation ?? 0) + 1, digestHigh: digest.high, digestLow: digest.low)
        }
    }

    /// u8 length, "N-H" (at most 19 digits, "-", 32 hex digits), u8 kind.
    private static let prefixBytesMax = 1 + 19 + 1 + 2 * RevisionID.digestBytes + 1

    /// Writes `revision.description` as ASCII at `start`; returns the index after it.
    private static func writeText(of revision: RevisionID, into buffer: UnsafeMutableBufferPointer<UInt8>, at start: Int) -> Int {
        var digits = 1
        var rest = revision.generation / 10
        while rest > 0 {
            digits += 1
            rest /= 10
        }
        var generation = revision.generation
        for offset in stride(from: digits - 1, through: 0, by: -1) {
            buffer[start + offset] = UInt8(ascii: "0") + UInt8(generation % 10)
            generation /= 10
        }
        var index = start + digits
        buffer[index] = UInt8(ascii: "-")
        index += 1
        for shift in stride(from: 124, through: 0, by: -4) {
            let half = shift >= 64 ? revision.digestHigh : revision.digestLow
            buffer[index] = Hex.digits[Int((half >> UInt64(shift % 64)) & 0xF)]
            index += 1
        }
        return index
    }

    /// The id of the revision with this parent, kind and body.
    public static func revisionID(parent: RevisionID?, kind: RevisionKind, body: JSONValue) -> RevisionID {
        revisionID(parent: parent, kind: kind, canonicalBody: CanonicalJSON.encode(body))
    }
}
