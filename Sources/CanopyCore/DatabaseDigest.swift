/// A digest of what a database holds: for every document, its id and its open leaves (the
/// leaves not closed by a resolution, deletions included), combined so that two databases holding
/// the same documents with the same open leaves have the same digest, however and in whatever
/// order they came to hold them (`Protocol/digests.md`).
///
/// It is the exclusive-or of the documents' digests (`DigestTree.document(id:openLeaves:)`), so
/// a write changes it by the old and new digests of the documents it writes: no scan.
public struct DatabaseDigest: Hashable, Sendable, CustomStringConvertible {
    /// The 32 bytes as four big-endian words.
    public private(set) var words: (UInt64, UInt64, UInt64, UInt64)

    /// The digest of a database that holds no document: 32 zero bytes.
    public static let empty = DatabaseDigest(words: (0, 0, 0, 0))

    init(words: (UInt64, UInt64, UInt64, UInt64)) {
        self.words = words
    }

    /// The digest whose bytes are `bytes`; nil unless there are exactly 32.
    public init?(bytes: some Collection<UInt8>) {
        guard bytes.count == 32 else { return nil }
        let array = Array(bytes)
        func word(_ index: Int) -> UInt64 {
            array[(index * 8)..<(index * 8 + 8)].reduce(0) { $0 << 8 | UInt64($1) }
        }
        words = (word(0), word(1), word(2), word(3))
    }

    /// The 32 bytes.
    public var bytes: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(32)
        for word in [words.0, words.1, words.2, words.3] {
            withUnsafeBytes(of: word.bigEndian) { bytes.append(contentsOf: $0) }
        }
        return bytes
    }

    /// The 64 lowercase hex digits of the bytes.
    public var hex: String { Hex.encode(bytes) }

    public var description: String { hex }

    /// Adds or removes one document's digest (the same operation: exclusive-or).
    public mutating func toggle(_ other: DatabaseDigest) {
        words = (words.0 ^ other.words.0, words.1 ^ other.words.1, words.2 ^ other.words.2, words.3 ^ other.words.3)
    }

    public static func == (lhs: DatabaseDigest, rhs: DatabaseDigest) -> Bool {
        lhs.words == rhs.words
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(words.0)
        hasher.combine(words.1)
        hasher.combine(words.2)
        hasher.combine(words.3)
    }
}

/// How documents are digested and placed in the digest tree's buckets (`Protocol/digests.md`).
public enum DigestTree {
    /// The buckets of the tree's lowest level: a document's bucket depends on its id alone, so
    /// a document is in the same bucket on every node.
    public static let bucketCount = 256

    /// The bucket of `documentID`: the high byte of the 32-bit FNV-1a hash of its UTF-8 bytes.
    public static func bucket(of documentID: String) -> Int {
        Int(idHash(of: documentID) >> 24)
    }

    /// The digest of one document: BLAKE2b-256 of `canopy-digest-v1`, a zero byte, the id's
    /// UTF-8 length (u32, big-endian) and bytes, then per open leaf in ascending revision order
    /// its generation (u32, big-endian), its 16-byte digest and 1 when it is a deletion, else 0.
    public static func document(id: String, openLeaves: [(revision: RevisionID, deleted: Bool)]) -> DatabaseDigest {
        hash(id: id, .many(openLeaves.count > 1 ? openLeaves.sorted { $0.revision < $1.revision } : openLeaves))
    }

    /// The digest of a document whose tree has `leaves` (closed ones are left out). A document
    /// with one leaf, as most have, is hashed without an array.
    public static func document(id: String, leaves: [RevTree.Node]) -> DatabaseDigest {
        if leaves.count == 1, !leaves[0].kind.isClosed {
            return hash(id: id, .one(leaves[0].id, leaves[0].kind.isDeleted))
        }
        return document(id: id, openLeaves: leaves.filter { !$0.kind.isClosed }.map { ($0.id, $0.kind.isDeleted) })
    }

    /// The digest of a document whose only open leaf is `leaf`.
    public static func document(id: String, leaf: RevisionID, deleted: Bool) -> DatabaseDigest {
        hash(id: id, .one(leaf, deleted))
    }

    /// A document's open leaves, in ascending order: one (no array), or any number.
    private enum Leaves {
        case one(RevisionID, Bool)
        case many([(revision: RevisionID, deleted: Bool)])
    }

    /// The digest of `id` and its open leaves `leaves`.
    private static func hash(id: String, _ leaves: Leaves) -> DatabaseDigest {
        let words = Blake2b.digest32 { update in
            // A constant size: the scratch stays on the stack. 17 bytes of prefix and a u32,
            // then 21 bytes per leaf.
            withUnsafeTemporaryAllocation(byteCount: 32, alignment: 8) { scratch in
                let prefix = "canopy-digest-v1"
                var utf8 = id.utf8
                let idCount = utf8.count
                var offset = 0
                for byte in prefix.utf8 {
                    scratch[offset] = byte
                    offset += 1
                }
                scratch[offset] = 0
                scratch.storeBytes(of: UInt32(truncatingIfNeeded: idCount).bigEndian, toByteOffset: offset + 1, as: UInt32.self)
                update(UnsafeRawBufferPointer(rebasing: scratch[0..<(offset + 5)]))
                if utf8.withContiguousStorageIfAvailable({ update(UnsafeRawBufferPointer($0)) }) == nil {
                    var copy = id
                    copy.makeContiguousUTF8()
                    utf8 = copy.utf8
                    _ = utf8.withContiguousStorageIfAvailable { update(UnsafeRawBufferPointer($0)) }
                }
                func leaf(_ revision: RevisionID, _ deleted: Bool) {
                    scratch.storeBytes(of: UInt32(truncatingIfNeeded: revision.generation).bigEndian, toByteOffset: 0, as: UInt32.self)
                    scratch.storeBytes(of: revision.digestHigh.bigEndian, toByteOffset: 4, as: UInt64.self)
                    scratch.storeBytes(of: revision.digestLow.bigEndian, toByteOffset: 12, as: UInt64.self)
                    scratch[20] = deleted ? 1 : 0
                    update(UnsafeRawBufferPointer(rebasing: scratch[0..<21]))
                }
                switch leaves {
                case .one(let revision, let deleted): leaf(revision, deleted)
                case .many(let all): for each in all { leaf(each.revision, each.deleted) }
                }
            }
        }
        return DatabaseDigest(words: words)
    }
}
