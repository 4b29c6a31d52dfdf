/// One revision in a `revisions` message. It does not repeat the document id, revision id or kind:
/// it names its place in the list of revisions the target asked for, and the target looks them up
/// in the `changes` request it answered.
public struct RevisionTransfer: Equatable, Sendable {
    /// How many requested revisions the source skips before this one (0 normally; a source
    /// that can no longer supply a revision skips it).
    public var skip: Int
    /// Digests of the revision's ancestors, parent first; generations are consecutive, so the
    /// parent has the revision's generation − 1, and so on. At most revsLimitMax − 1 entries.
    public var ancestry: [RevisionDigest]
    /// 0: the ancestry ends at the root (its last element has generation 1) or where the
    /// source's tree was stemmed. k ≥ 1: the parent of the last listed revision (or of the revision itself when
    /// `ancestry` is empty) is known ancestor k − 1 of this entry's reply item. Always 0 when
    /// `cutParent` is set.
    public var knownAncestorTail: Int
    /// When the ancestry was cut above a revision the source knows but the target did not name:
    /// that revision's digest (the parent of the last listed revision, or of the revision itself
    /// when `ancestry` is empty). A link the target records; not a revision it receives.
    public var cutParent: RevisionDigest?
    /// The body: canonical JSON (§6.6 says what the target does with a body that is not).
    public var body: [UInt8]
    /// True when the revision's id is an imported one (§6.6 "Imported revision ids"): taken from
    /// another system, such as CouchDB, and not the hash of the revision's content. Sent only to a
    /// peer whose `hello` has the `importedIDs` feature.
    public var importedID: Bool

    public init(
        skip: Int = 0, ancestry: [RevisionDigest], knownAncestorTail: Int, cutParent: RevisionDigest? = nil, body: [UInt8],
        importedID: Bool = false
    ) {
        precondition(cutParent == nil || knownAncestorTail == 0, "a cut parent and a known-ancestor tail exclude each other")
        self.skip = skip
        self.ancestry = ancestry
        self.knownAncestorTail = knownAncestorTail
        self.cutParent = cutParent
        self.body = body
        self.importedID = importedID
    }
}

/// `revisions` (§6.6): the source sends the revisions a `changesReply` asked for, with their
/// ancestry and bodies. One request's revisions may span several `revisions` messages (so that no
/// message exceeds messageBytesMax); the last has the `final` flag. Revisions are sent in the
/// order of the reply (entries ascending, then revision indices ascending), each at most once.
///
/// | field | type | meaning |
/// | --- | --- | --- |
/// | requestID | varint | the `changes` request these revisions answer |
/// | flags | u8 | bit 0 `final`: no more `revisions` for this request; bit 1 `revisionFlags`: each revision starts with its own flags byte |
/// | count | varint | 0...batchRevisionsMax |
/// | revisions | revision × count | see below |
///
/// Revision: `[u8 revision flags, only with revisionFlags] ‖ varint skip ‖ varint shape ‖ 16 bytes × ancestryCount ‖ [16 bytes cut parent] ‖
/// bytes body`, where `shape = ancestryCount × 64 + tail` (ancestryCount 0...revsLimitMax − 1, tail
/// 0...knownAncestorsMax < 63, or 63 when the cut parent's digest follows the ancestry) so the
/// usual shapes — no ancestry, or "continues at known ancestor 1" — cost one byte; the body is
/// 0...bodyBytesMax bytes. The position of a revision in the reply's flattened missing list is
/// the previous revision's position + 1 + skip (the first of a request: skip). A revision's flags
/// byte has bit 0 `importedID`; `revisionFlags` is set exactly when some revision of the message
/// has a flag set, so a message without imported ids is encoded as it always was.
public struct Revisions: WireMessageBody {
    public static let messageType = MessageType.revisions
    static let finalFlag: UInt8 = 0x01
    /// Message flag: every revision starts with a flags byte.
    static let revisionFlagsFlag: UInt8 = 0x02
    /// Revision flag: the revision's id is imported (not a content hash).
    static let importedIDFlag: UInt8 = 0x01
    /// `shape = ancestryCount << tailBits | tail`.
    static let tailBits: UInt64 = 6
    /// The tail value saying "cut above a revision the target did not name; its digest follows".
    static let cutParentTail = 63

    public var requestID: RequestID
    public var final: Bool
    public var revisions: [RevisionTransfer]

    public init(requestID: RequestID, final: Bool, revisions: [RevisionTransfer]) {
        self.requestID = requestID
        self.final = final
        self.revisions = revisions
    }

    public func encode(into writer: inout ByteWriter) {
        precondition(revisions.count <= WireLimits.batchRevisionsMax, "too many revisions")
        writer.reserve(additional: revisions.reduce(16) { $0 + 32 + $1.body.count + 16 * $1.ancestry.count })
        writer.writeVarint(requestID)
        let flagged = revisions.contains(where: \.importedID)
        writer.writeByte((final ? Revisions.finalFlag : 0) | (flagged ? Revisions.revisionFlagsFlag : 0))
        writer.writeVarint(UInt64(revisions.count))
        for revision in revisions {
            precondition(revision.skip >= 0 && revision.ancestry.count < WireLimits.revsLimitMax, "ancestry too long")
            precondition((0...WireLimits.knownAncestorsMax).contains(revision.knownAncestorTail), "tail out of range")
            if flagged { writer.writeByte(revision.importedID ? Revisions.importedIDFlag : 0) }
            writer.writeVarint(UInt64(revision.skip))
            let tail = revision.cutParent == nil ? revision.knownAncestorTail : Revisions.cutParentTail
            writer.writeVarint(UInt64(revision.ancestry.count) << Revisions.tailBits | UInt64(tail))
            for digest in revision.ancestry { writer.writeDigest(digest) }
            if let cutParent = revision.cutParent { writer.writeDigest(cutParent) }
            writer.writeLengthPrefixed(revision.body, maxBytes: WireLimits.bodyBytesMax)
        }
    }

    public init(from reader: inout ByteReader) throws(ProtocolError) {
        requestID = try reader.readRequestID("revisions.requestID")
        let flags = try reader.readByte("revisions.flags")
        guard flags & ~(Revisions.finalFlag | Revisions.revisionFlagsFlag) == 0 else {
            throw .invalidValue(field: "revisions.flags", value: UInt64(flags))
        }
        final = flags & Revisions.finalFlag != 0
        let flagged = flags & Revisions.revisionFlagsFlag != 0
        let count = try reader.readVarint("revisions.count", in: 0...WireLimits.batchRevisionsMax)
        revisions = []
        revisions.reserveCapacity(count)
        for _ in 0..<count {
            var importedID = false
            if flagged {
                let revisionFlags = try reader.readByte("revisions.revisionFlags")
                guard revisionFlags & ~Revisions.importedIDFlag == 0 else {
                    throw .invalidValue(field: "revisions.revisionFlags", value: UInt64(revisionFlags))
                }
                importedID = revisionFlags & Revisions.importedIDFlag != 0
            }
            let skip = try reader.readVarint("revisions.skip", in: 0...WireLimits.batchRevisionsMax)
            let shape = try reader.readVarint("revisions.shape")
            let ancestryCount = Int(clamping: shape >> Revisions.tailBits)
            let tail = Int(shape & (1 << Revisions.tailBits - 1))
            guard ancestryCount < WireLimits.revsLimitMax else {
                throw .outOfRange(field: "revisions.ancestryCount", value: shape >> Revisions.tailBits, min: 0,
                                  max: UInt64(WireLimits.revsLimitMax - 1))
            }
            let cut = tail == Revisions.cutParentTail
            guard tail <= WireLimits.knownAncestorsMax || cut else {
                throw .outOfRange(field: "revisions.tail", value: UInt64(tail), min: 0, max: UInt64(WireLimits.knownAncestorsMax))
            }
            // Check the bytes are there before reserving room for them.
            guard reader.remainingCount >= ancestryCount * 16 else { throw .truncated(field: "revisions.ancestry") }
            var ancestry: [RevisionDigest] = []
            // Reserving on the empty array would cost a call per revision for nothing.
            if ancestryCount > 0 { ancestry.reserveCapacity(ancestryCount) }
            for _ in 0..<ancestryCount { ancestry.append(try reader.readDigest("revisions.ancestry")) }
            let cutParent = cut ? try reader.readDigest("revisions.cutParent") : nil
            let body = try reader.readLengthPrefixed("revisions.body", in: 0...WireLimits.bodyBytesMax)
            revisions.append(RevisionTransfer(
                skip: skip, ancestry: ancestry, knownAncestorTail: cut ? 0 : tail, cutParent: cutParent, body: body,
                importedID: importedID))
        }
        // One encoding per message: the per-revision flags are present only when one is set.
        guard !flagged || revisions.contains(where: \.importedID) else {
            throw .invalidValue(field: "revisions.flags", value: UInt64(flags))
        }
    }
}
