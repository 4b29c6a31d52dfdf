import CanopyCore
import CanopyStore

/// Edits an agent's SQLite file behind its back, as damage or another build would leave it.
enum StoredRevisionEdits {
    /// Rewrites the only revision of `documentID` in the file at `path` so that its body is
    /// `body` as given (not canonical JSON) and its id the hash of that body: a revision whose id
    /// checks out, so its own node sends it, but which a peer refuses as not canonical. This is
    /// what a peer running a build that wrote bodies differently would send.
    static func plantNonCanonicalBody(in path: String, documentID: String, body: String) throws {
        let bytes = Array(body.utf8)
        let id = RevisionHasher.revisionID(parent: nil, kind: .live, canonicalBody: bytes)
        var digest: [UInt8] = []
        withUnsafeBytes(of: id.digestHigh.bigEndian) { digest += $0 }
        withUnsafeBytes(of: id.digestLow.bigEndian) { digest += $0 }
        var leaves: [UInt8] = []
        withUnsafeBytes(of: UInt32(1).bigEndian) { leaves += $0 }
        leaves += digest + [RevisionKind.live.rawValue]
        let database = try Database(path: path)
        try database.run(
            "UPDATE revisions SET digest = ?, body = ? WHERE doc_key = (SELECT doc_key FROM documents WHERE doc_id = ?)",
            .blob(digest), .blob(bytes), .text(documentID))
        // The row is rewritten as that build would have written it: with its check value.
        let key = try database.scalarInt("SELECT doc_key FROM documents WHERE doc_id = ?", .text(documentID)) ?? 0
        try database.run(
            "UPDATE documents SET current_digest = ?, leaves = ?, row_check = ? WHERE doc_id = ?", .blob(digest), .blob(leaves),
            .integer(RowCheck.value(documentKey: key, leaves: leaves, documentID: documentID)), .text(documentID))
    }

    /// Flips bit `bit` of byte `byte` of `documentID`'s leaf list, as a damaged disk would.
    static func flipLeafBit(in path: String, documentID: String, byte: Int = 9, bit: Int = 2) throws {
        let database = try Database(path: path)
        var leaves = try database.queryFirst("SELECT leaves FROM documents WHERE doc_id = ?", [.text(documentID)]) { $0.blob(0) ?? [] } ?? []
        leaves[byte] ^= UInt8(1 << bit)
        try database.run("UPDATE documents SET leaves = ? WHERE doc_id = ?", .blob(leaves), .text(documentID))
    }

    /// Runs `sql` on the file at `path` (a damaged flag, an id changed in the row and its index).
    static func edit(in path: String, _ sql: String) throws {
        try Database(path: path).execute(sql)
    }

    /// Changes the stored body of every revision whose body is `from` to `to`, as flipped bytes
    /// would: the revision id no longer matches the body.
    static func damageBody(in path: String, from: String, to: String) throws {
        let database = try Database(path: path)
        try database.run("UPDATE revisions SET body = ? WHERE body = ?", .blob(Array(to.utf8)), .blob(Array(from.utf8)))
    }

    /// Replaces the stored id of `documentID` with `bytes`, which need not be valid UTF-8.
    static func damageID(in path: String, documentID: String, to bytes: [UInt8]) throws {
        let database = try Database(path: path)
        try database.run("UPDATE documents SET doc_id = CAST(? AS TEXT) WHERE doc_id = ?", .blob(bytes), .text(documentID))
    }
}
