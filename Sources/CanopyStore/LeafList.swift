import CanopyCore

/// The packed leaf list stored in `documents.leaves`, so the changes feed needs no join:
/// per leaf, in canonical order (current first), `u32 generation (big-endian) ‖ 16-byte digest ‖
/// u8 kind` — 21 bytes each.
enum LeafList {
    static let entryBytes = 21

    /// Packs `leaves` (already in canonical order).
    static func encode(_ leaves: [RevTree.Node]) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(leaves.count * entryBytes)
        for leaf in leaves { append(leaf, to: &bytes) }
        return bytes
    }

    /// The list of a document with one leaf (every new document): one allocation, written in
    /// place.
    static func encode(single leaf: RevTree.Node) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: entryBytes) { buffer, count in
            let raw = UnsafeMutableRawBufferPointer(buffer)
            raw.storeBytes(of: UInt32(leaf.id.generation).bigEndian, as: UInt32.self)
            raw.storeBytes(of: leaf.id.digestHigh.bigEndian, toByteOffset: 4, as: UInt64.self)
            raw.storeBytes(of: leaf.id.digestLow.bigEndian, toByteOffset: 12, as: UInt64.self)
            raw[20] = leaf.kind.rawValue
            count = entryBytes
        }
    }

    private static func append(_ leaf: RevTree.Node, to bytes: inout [UInt8]) {
        let generation = UInt32(leaf.id.generation)
        for shift in stride(from: 24, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: generation >> UInt32(shift))) }
        for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: leaf.id.digestHigh >> UInt64(shift))) }
        for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: leaf.id.digestLow >> UInt64(shift))) }
        bytes.append(leaf.kind.rawValue)
    }

    /// Unpacks a leaf list; throws `StoreError.corrupt` for bytes this build did not write.
    static func decode(_ bytes: [UInt8], documentID: String) throws(StoreError) -> [(revision: RevisionID, kind: RevisionKind)] {
        try bytes.withUnsafeBytes { raw in
            Result { () throws(StoreError) in try decode(raw, documentID: documentID) { ($0, $1) } }
        }.get()
    }

    /// Unpacks a leaf list read in place (the changes feed reads the column of the current row:
    /// no copy of the bytes, one array per document), making each leaf with `make`.
    static func decode<Leaf>(
        _ bytes: UnsafeRawBufferPointer, documentID: String, as make: (RevisionID, RevisionKind) -> Leaf
    ) throws(StoreError) -> [Leaf] {
        guard bytes.count % entryBytes == 0 else { throw .corrupt(detail: "leaf list of \"\(documentID.prefix(80))\"") }
        var leaves: [Leaf] = []
        leaves.reserveCapacity(bytes.count / entryBytes)
        var offset = 0
        while offset < bytes.count {
            let generation = Int(UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
            guard (1...RevisionID.generationMax).contains(generation), let kind = RevisionKind(rawValue: bytes[offset + 20]) else {
                throw .corrupt(detail: "leaf list of \"\(documentID.prefix(80))\"")
            }
            let high = UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: offset + 4, as: UInt64.self))
            let low = UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: offset + 12, as: UInt64.self))
            leaves.append(make(RevisionID(generation: generation, digestHigh: high, digestLow: low), kind))
            offset += entryBytes
        }
        return leaves
    }
}
