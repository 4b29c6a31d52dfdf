import CanopyCore

/// The packed leaf list stored in `documents.leaves`, so the changes feed needs no join:
/// per leaf, in canonical order (current first), `u32 generation (big-endian) ‖ 16-byte digest ‖
/// u8 kind` — 21 bytes each.
enum LeafList {
    static let entryBytes = 21

    /// Packs `leaves` (already in canonical order).
    static func encode(_ leaves: [RevTree.Node]) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: leaves.count * entryBytes) { buffer, count in
            let raw = UnsafeMutableRawBufferPointer(buffer)
            for (index, leaf) in leaves.enumerated() { store(leaf, into: raw, at: index * entryBytes) }
            count = leaves.count * entryBytes
        }
    }

    /// Writes one entry at `offset`: generation, digest halves (big-endian), kind. `raw` must
    /// hold `offset + entryBytes` bytes.
    static func store(_ leaf: RevTree.Node, into raw: UnsafeMutableRawBufferPointer, at offset: Int) {
        raw.storeBytes(of: UInt32(leaf.id.generation).bigEndian, toByteOffset: offset, as: UInt32.self)
        raw.storeBytes(of: leaf.id.digestHigh.bigEndian, toByteOffset: offset + 4, as: UInt64.self)
        raw.storeBytes(of: leaf.id.digestLow.bigEndian, toByteOffset: offset + 12, as: UInt64.self)
        raw[offset + 20] = leaf.kind.rawValue
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
