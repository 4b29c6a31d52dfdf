/// The digest tree above a database's documents, as two nodes walk it to compare what they hold
/// (`Protocol/digests.md` §6).
///
/// A node is a prefix of the 32-bit FNV-1a hash of document ids (`DigestTree.idHash`): the root
/// is the empty prefix, its 256 children the buckets a store keeps, their children the 65,536
/// two-byte prefixes, and so on down to three bytes. A node's digest is the exclusive-or of the
/// digests of the documents under it, so two nodes whose digests differ hold different documents
/// under them, and a difference is found by following the children that differ: one round trip
/// per level, four at most.
public struct DigestNodePath: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The hash prefix, 0…`DigestTree.pathBytesMax` bytes.
    public let bytes: [UInt8]

    /// The root: every document.
    public static let root = DigestNodePath(unchecked: [])

    /// The node for `bytes`; nil when it is longer than `DigestTree.pathBytesMax`.
    public init?(bytes: [UInt8]) {
        guard bytes.count <= DigestTree.pathBytesMax else { return nil }
        self.bytes = bytes
    }

    private init(unchecked bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// The child whose next hash byte is `index`; nil under a node of the deepest level.
    public func child(_ index: UInt8) -> DigestNodePath? {
        DigestNodePath(bytes: bytes + [index])
    }

    /// Whether a document whose id hashes to `hash` is under this node.
    public func contains(_ hash: UInt32) -> Bool {
        range.contains(hash)
    }

    /// The id hashes under this node.
    public var range: ClosedRange<UInt32> {
        let shift = 32 - 8 * bytes.count
        let prefix = bytes.reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let low = prefix << UInt64(shift)
        let high = low + (UInt64(1) << UInt64(shift)) - 1
        return UInt32(low)...UInt32(high)
    }

    /// The child index of a document's hash under this node (its next hash byte).
    public func childIndex(of hash: UInt32) -> UInt8 {
        UInt8(truncatingIfNeeded: hash >> UInt32(24 - 8 * bytes.count))
    }

    public static func < (lhs: DigestNodePath, rhs: DigestNodePath) -> Bool {
        lhs.bytes.lexicographicallyPrecedes(rhs.bytes)
    }

    /// The bytes in hex, `root` for the root.
    public var description: String { bytes.isEmpty ? "root" : Hex.encode(bytes) }
}

/// One open leaf of a document, as the digest covers it.
public struct DigestLeaf: Hashable, Sendable, Comparable {
    public var revision: RevisionID
    public var deleted: Bool

    public init(revision: RevisionID, deleted: Bool) {
        self.revision = revision
        self.deleted = deleted
    }

    public static func < (lhs: DigestLeaf, rhs: DigestLeaf) -> Bool { lhs.revision < rhs.revision }
}

/// A document as the digest covers it: its id and open leaves, in ascending revision order.
public struct DigestDocument: Hashable, Sendable {
    public var id: String
    public var leaves: [DigestLeaf]

    /// The document with `leaves` put in ascending revision order.
    public init(id: String, leaves: [DigestLeaf]) {
        self.id = id
        self.leaves = leaves.sorted()
    }

    /// Its document digest (`Protocol/digests.md` §2).
    public var digest: DatabaseDigest {
        DigestTree.document(id: id, openLeaves: leaves.map { ($0.revision, $0.deleted) })
    }

    /// The hash of its id, which places it in the tree.
    public var idHash: UInt32 { DigestTree.idHash(of: id) }
}

/// One child of a node: how many documents are under it and their digest. A child with no
/// document is not listed.
public struct DigestChild: Hashable, Sendable {
    public var index: UInt8
    public var documents: UInt64
    public var digest: DatabaseDigest

    public init(index: UInt8, documents: UInt64, digest: DatabaseDigest) {
        self.index = index
        self.documents = documents
        self.digest = digest
    }
}

/// What a node holds, as one side answers for it: its children, or, when it holds few documents
/// (at most `DigestTree.listedDocumentsMax`) or is of the deepest level, the documents themselves.
public enum DigestNodeAnswer: Hashable, Sendable {
    case children([DigestChild])
    case documents([DigestDocument])
}

extension DigestTree {
    /// The 32-bit FNV-1a hash of the id's UTF-8 bytes (offset basis `0x811C9DC5`, prime
    /// `0x01000193`); its high byte is the document's bucket.
    public static func idHash(of documentID: String) -> UInt32 {
        var hash: UInt32 = 0x811C_9DC5
        for byte in documentID.utf8 {
            hash ^= UInt32(byte)
            hash &*= 0x0100_0193
        }
        return hash
    }

    /// The longest node path: three hash bytes. A node of that level is always answered with
    /// its documents.
    public static let pathBytesMax = 3
    /// A node holding at most this many documents is answered with its documents rather than
    /// its children.
    public static let listedDocumentsMax = 64

    /// The answer for `path` from `documents`, every document under it (and possibly others,
    /// which are skipped).
    public static func answer(for path: DigestNodePath, from documents: some Sequence<DigestDocument>) -> DigestNodeAnswer {
        let under = documents.filter { path.contains($0.idHash) }
        if under.count <= listedDocumentsMax || path.bytes.count == pathBytesMax {
            return .documents(under.sorted { $0.id < $1.id })
        }
        return .children(children(of: path, from: under))
    }

    /// The children of `path` from `documents` (every one of them under it).
    public static func children(of path: DigestNodePath, from documents: some Sequence<DigestDocument>) -> [DigestChild] {
        var counts = [UInt64](repeating: 0, count: 256)
        var digests = [DatabaseDigest](repeating: .empty, count: 256)
        for document in documents {
            let index = Int(path.childIndex(of: document.idHash))
            counts[index] += 1
            digests[index].toggle(document.digest)
        }
        return (0..<256).compactMap { index in
            counts[index] == 0 ? nil : DigestChild(index: UInt8(index), documents: counts[index], digest: digests[index])
        }
    }
}
