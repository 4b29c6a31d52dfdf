/// One document in a `changes` request: the source's sequence for its latest change, its id, and
/// all its leaf revisions (open and closed) with their kinds.
public struct ChangesEntry: Equatable, Sendable {
    public var sequence: UInt64
    public var docID: String
    /// 1...entryRevisionsMax leaves; the order is the sender's and is what revision indices in
    /// `changesReply` and `revisions` refer to.
    public var revisions: [LeafRevision]

    public init(sequence: UInt64, docID: String, revisions: [LeafRevision]) {
        self.sequence = sequence
        self.docID = docID
        self.revisions = revisions
    }
}

/// `changes` (§6.4), a request from the source to a subscribed target, BLIP-style: "here are
/// documents that changed; which of these revisions do you lack?". The target answers with one
/// `changesReply`. Entries are in strictly increasing sequence order, and sequences keep
/// increasing across the batches of one subscription.
///
/// | field | type | meaning |
/// | --- | --- | --- |
/// | requestID | varint | ≥ 1 |
/// | subscriptionID | varint | the `subscribe` this batch serves |
/// | flags | u8 | bit 0 `caughtUp`: this batch reaches the source's current end |
/// | entryCount | varint | 0...changesEntriesMax |
/// | entries | entry × entryCount | see below |
///
/// Entry: `varint sequenceDelta ‖ string docID ‖ varint revisionCount ‖ rev × revisionCount`.
/// `sequenceDelta` is the sequence itself for the first entry (≥ 1) and the increase over the
/// previous entry's sequence (≥ 1) after it, so a dense batch spends one byte per sequence.
/// `revisionCount` is 1...entryRevisionsMax and the sum over the batch at most batchRevisionsMax.
public struct Changes: WireMessageBody {
    public static let messageType = MessageType.changes
    static let caughtUpFlag: UInt8 = 0x01

    public var requestID: RequestID
    public var subscriptionID: RequestID
    public var caughtUp: Bool
    public var entries: [ChangesEntry]

    public init(requestID: RequestID, subscriptionID: RequestID, caughtUp: Bool, entries: [ChangesEntry]) {
        self.requestID = requestID
        self.subscriptionID = subscriptionID
        self.caughtUp = caughtUp
        self.entries = entries
    }

    /// Leaf revisions summed over all entries.
    public var revisionCount: Int { entries.reduce(0) { $0 + $1.revisions.count } }

    public func encode(into writer: inout ByteWriter) {
        precondition(entries.count <= WireLimits.changesEntriesMax, "too many entries")
        precondition(revisionCount <= WireLimits.batchRevisionsMax, "too many revisions in batch")
        writer.reserve(additional: entries.reduce(16) { $0 + 8 + $1.docID.utf8.count + 18 * $1.revisions.count })
        writer.writeVarint(requestID)
        writer.writeVarint(subscriptionID)
        writer.writeByte(caughtUp ? Changes.caughtUpFlag : 0)
        writer.writeVarint(UInt64(entries.count))
        var previous: UInt64 = 0
        for entry in entries {
            precondition(entry.sequence > previous, "sequences must increase")
            precondition((1...WireLimits.entryRevisionsMax).contains(entry.revisions.count), "entry revision count")
            writer.writeVarint(entry.sequence - previous)
            previous = entry.sequence
            writer.writeDocID(entry.docID)
            writer.writeVarint(UInt64(entry.revisions.count))
            for revision in entry.revisions { writer.writeLeafRevision(revision) }
        }
    }

    public init(from reader: inout ByteReader) throws(ProtocolError) {
        requestID = try reader.readRequestID("changes.requestID")
        subscriptionID = try reader.readRequestID("changes.subscriptionID")
        let flags = try reader.readByte("changes.flags")
        guard flags & ~Changes.caughtUpFlag == 0 else { throw .invalidValue(field: "changes.flags", value: UInt64(flags)) }
        caughtUp = flags & Changes.caughtUpFlag != 0
        let count = try reader.readVarint("changes.entryCount", in: 0...WireLimits.changesEntriesMax)
        entries = []
        entries.reserveCapacity(count)
        var sequence: UInt64 = 0
        var revisionsSoFar = 0
        for _ in 0..<count {
            let delta = try reader.readVarint("changes.sequence")
            let (next, overflow) = sequence.addingReportingOverflow(delta)
            // Sequences strictly increase: a zero step or one past 2^64 − 1 breaks the layout.
            guard delta >= 1, !overflow else { throw .invalidValue(field: "changes.sequence", value: delta) }
            sequence = next
            let docID = try reader.readDocID("changes.docID")
            let revisionsLeft = WireLimits.batchRevisionsMax - revisionsSoFar
            let revisionCount = try reader.readVarint(
                "changes.revisionCount", in: 1...min(WireLimits.entryRevisionsMax, max(1, revisionsLeft)))
            guard revisionCount <= revisionsLeft else {
                throw .outOfRange(field: "changes.batchRevisions", value: UInt64(revisionsSoFar + revisionCount),
                                  min: 0, max: UInt64(WireLimits.batchRevisionsMax))
            }
            revisionsSoFar += revisionCount
            var revisions: [LeafRevision] = []
            revisions.reserveCapacity(revisionCount)
            for _ in 0..<revisionCount { revisions.append(try reader.readLeafRevision("changes.revision")) }
            entries.append(ChangesEntry(sequence: sequence, docID: docID, revisions: revisions))
        }
    }
}
