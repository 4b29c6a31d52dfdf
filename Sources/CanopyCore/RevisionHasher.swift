/// Computes content-addressed revision ids (DESIGN.md §2, `Protocol/replication-v1.md` "Revision
/// ids"). The digest is BLAKE2b with a 16-byte output (`crypto_generichash`, no key) over
///
///     u8 len(parent) ‖ parent as ASCII "N-H" (empty for generation 1) ‖ u8 kind ‖ canonical body
///
/// where `kind` is the `RevisionKind` byte. The same edit made on two nodes therefore gets the same
/// id, and a closing tombstone can never share an id with a user's deletion.
public enum RevisionHasher {
    /// The id of the revision with this parent, kind and canonical body bytes.
    public static func revisionID(parent: RevisionID?, kind: RevisionKind, canonicalBody: [UInt8]) -> RevisionID {
        let parentText = parent?.description.utf8 ?? "".utf8
        var input: [UInt8] = []
        input.reserveCapacity(2 + parentText.count + canonicalBody.count)
        input.append(UInt8(parentText.count))
        input.append(contentsOf: parentText)
        input.append(kind.rawValue)
        input.append(contentsOf: canonicalBody)
        let digest = Blake2b.hash(input, outputBytes: RevisionID.digestBytes)
        return RevisionID(generation: (parent?.generation ?? 0) + 1, digest: digest)!
    }

    /// The id of the revision with this parent, kind and body.
    public static func revisionID(parent: RevisionID?, kind: RevisionKind, body: JSONValue) -> RevisionID {
        revisionID(parent: parent, kind: kind, canonicalBody: CanonicalJSON.encode(body))
    }
}
