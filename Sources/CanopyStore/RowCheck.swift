import CSodium
import CanopyCore

/// `documents.row_check` (schema version 8 on): SipHash-2-4 (libsodium's `crypto_shorthash`,
/// under a fixed key) of the document's key, its leaf list and its id, so that damage to a
/// document's row that leaves the row well formed is found: a flipped bit in a leaf's digest, or
/// an id changed in both the row and its index (which SQLite's integrity check cannot see, and
/// which would otherwise replicate under the wrong id). The row's other columns follow from the
/// leaf list (the current revision, the deleted and conflicted flags) and are checked against it.
///
/// It guards against damage, not against someone who edits the file on purpose: the key is not
/// secret. The changes feed checks every row it reads, so a damaged row is left out and reported
/// before a peer or an export reads it; `DocumentStore.checkRows` checks every row in the file.
package enum RowCheck {
    private static let key: [UInt8] = Array("canopy.rowcheck1".utf8)

    /// The check value of a row with this key, leaf list and id.
    package static func value(documentKey: Int64, leaves: UnsafeRawBufferPointer, documentID: String) -> Int64 {
        var id = documentID
        return id.withUTF8 { value(documentKey: documentKey, leaves: leaves, idBytes: UnsafeRawBufferPointer($0)) }
    }

    /// The check value of a row with this key, leaf list and stored id bytes (valid UTF-8 or not).
    package static func value(documentKey: Int64, leaves: UnsafeRawBufferPointer, idBytes: UnsafeRawBufferPointer) -> Int64 {
        let count = 8 + leaves.count + idBytes.count
        return withUnsafeTemporaryAllocation(byteCount: count, alignment: 8) { buffer in
            buffer.storeBytes(of: UInt64(bitPattern: documentKey).bigEndian, toByteOffset: 0, as: UInt64.self)
            if leaves.count > 0 { UnsafeMutableRawBufferPointer(rebasing: buffer[8..<(8 + leaves.count)]).copyMemory(from: leaves) }
            if idBytes.count > 0 { UnsafeMutableRawBufferPointer(rebasing: buffer[(8 + leaves.count)...]).copyMemory(from: idBytes) }
            var out: UInt64 = 0
            withUnsafeMutableBytes(of: &out) { hash in
                key.withUnsafeBufferPointer { key in
                    _ = crypto_shorthash(
                        hash.baseAddress!.assumingMemoryBound(to: UInt8.self), buffer.baseAddress!.assumingMemoryBound(to: UInt8.self),
                        UInt64(count), key.baseAddress!)
                }
            }
            return Int64(bitPattern: UInt64(littleEndian: out))
        }
    }

    /// `value(documentKey:leaves:documentID:)` of a leaf list held in an array.
    package static func value(documentKey: Int64, leaves: [UInt8], documentID: String) -> Int64 {
        leaves.withUnsafeBytes { value(documentKey: documentKey, leaves: $0, documentID: documentID) }
    }

    /// The check value of a new document's row with one leaf.
    static func value(documentKey: Int64, leaf: RevTree.Node, documentID: String) -> Int64 {
        withUnsafeTemporaryAllocation(byteCount: LeafList.entryBytes, alignment: 8) { buffer in
            LeafList.store(leaf, into: buffer, at: 0)
            return value(documentKey: documentKey, leaves: UnsafeRawBufferPointer(buffer), documentID: documentID)
        }
    }
}
