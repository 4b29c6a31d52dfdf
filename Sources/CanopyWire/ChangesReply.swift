import CanopyCore

/// The target's answer for one `changes` entry: which of the entry's revisions it lacks, and which
/// revisions of that document it has that may be their ancestors (its leaves of lower
/// generation), so the source can stop each ancestry there.
public struct ChangesReplyItem: Equatable, Sendable {
    /// Indices into the entry's `revisions`, strictly ascending; empty: nothing missing.
    public var missing: [Int]
    /// At most knownAncestorsMax revisions; only sent when `missing` is not empty.
    public var knownAncestors: [RevisionID]

    public init(missing: [Int] = [], knownAncestors: [RevisionID] = []) {
        precondition(!missing.isEmpty || knownAncestors.isEmpty, "known ancestors only with missing revisions")
        self.missing = missing
        self.knownAncestors = knownAncestors
    }

    /// Nothing missing.
    public static let complete = ChangesReplyItem()

    /// `missing` when only the first revision is: the commonest non-empty value (an entry with
    /// one leaf), shared so that the decoder and the target need no array per document for it.
    public static let firstOnly = [0]
}

/// `changesReply` (§6.5): the revision diff, the target's answer to one `changes` request. It has
/// exactly one item per entry of the request, in the same order.
///
/// | field | type | meaning |
/// | --- | --- | --- |
/// | requestID | varint | the `changes` request answered |
/// | itemCount | varint | equals the request's entry count |
/// | items | item × itemCount | see below |
///
/// Item: `varint missingHeader`, then, unless it is 0, `varint knownCount ‖ revid × knownCount`
/// (knownCount 0...knownAncestorsMax).
/// - `missingHeader = 0`: nothing missing (one byte per document already in sync).
/// - odd: `missingHeader >> 1` is a bit mask, bit i set when revision i is missing. A sender MUST
///   use this form when every missing index is below 63 (the usual single-leaf case is one byte).
/// - even, ≥ 2: `missingHeader >> 1` indices follow, each a varint: the first absolute, the rest
///   the increase over the previous (≥ 1). Valid only when some index is ≥ 63.
public struct ChangesReply: WireMessageBody {
    public static let messageType = MessageType.changesReply
    /// Revision indices below this use the bit-mask form.
    static let maskBits = 63

    public var requestID: RequestID
    public var items: [ChangesReplyItem]

    public init(requestID: RequestID, items: [ChangesReplyItem]) {
        self.requestID = requestID
        self.items = items
    }

    public func encode(into writer: inout ByteWriter) {
        precondition(items.count <= WireLimits.changesEntriesMax, "too many reply items")
        writer.writeVarint(requestID)
        writer.writeVarint(UInt64(items.count))
        for item in items {
            guard let last = item.missing.last else {
                writer.writeVarint(0)
                continue
            }
            precondition(item.knownAncestors.count <= WireLimits.knownAncestorsMax, "too many known ancestors")
            if last < ChangesReply.maskBits {
                let mask = item.missing.reduce(UInt64(0)) { $0 | 1 << UInt64($1) }
                writer.writeVarint(mask << 1 | 1)
            } else {
                writer.writeVarint(UInt64(item.missing.count) << 1)
                var previous = -1
                for index in item.missing {
                    precondition(index > previous, "missing indices must ascend")
                    writer.writeVarint(UInt64(previous < 0 ? index : index - previous))
                    previous = index
                }
            }
            writer.writeVarint(UInt64(item.knownAncestors.count))
            for ancestor in item.knownAncestors { writer.writeRevisionID(ancestor) }
        }
    }

    public init(from reader: inout ByteReader) throws(ProtocolError) {
        requestID = try reader.readRequestID("changesReply.requestID")
        let count = try reader.readVarint("changesReply.itemCount", in: 0...WireLimits.changesEntriesMax)
        items = []
        items.reserveCapacity(count)
        for _ in 0..<count { items.append(try ChangesReply.readItem(from: &reader)) }
    }

    /// Reads one item: the missing header in either form, then the known ancestors.
    private static func readItem(from reader: inout ByteReader) throws(ProtocolError) -> ChangesReplyItem {
        let header = try reader.readVarint("changesReply.missing")
        if header == 0 { return .complete }
        // An empty mask would say "missing" and "nothing missing" at once.
        guard header != 1 else { throw .invalidValue(field: "changesReply.missing", value: header) }
        var missing: [Int] = []
        if header == 0b11 {
            missing = ChangesReplyItem.firstOnly
        } else if header & 1 == 1 {
            let mask = header >> 1
            missing.reserveCapacity(mask.nonzeroBitCount)
            for bit in 0..<maskBits where mask & (1 << UInt64(bit)) != 0 { missing.append(bit) }
        } else {
            let count = Int(min(header >> 1, UInt64(Int.max)))
            guard count <= WireLimits.entryRevisionsMax else {
                throw .outOfRange(field: "changesReply.missingCount", value: header >> 1, min: 1,
                                  max: UInt64(WireLimits.entryRevisionsMax))
            }
            let field = "changesReply.missingIndex"
            missing.reserveCapacity(count)
            var index = -1
            for _ in 0..<count {
                let step = try reader.readVarint(field, in: (index < 0 ? 0 : 1)...WireLimits.entryRevisionsMax)
                index = index < 0 ? step : index + step
                guard index < WireLimits.entryRevisionsMax else {
                    throw .outOfRange(field: field, value: UInt64(index), min: 0, max: UInt64(WireLimits.entryRevisionsMax - 1))
                }
                missing.append(index)
            }
            // The list form is only for indices the mask cannot hold: one encoding per value.
            guard index >= maskBits else { throw .invalidValue(field: "changesReply.missing", value: header) }
        }
        let knownCount = try reader.readVarint("changesReply.knownCount", in: 0...WireLimits.knownAncestorsMax)
        var known: [RevisionID] = []
        if knownCount > 0 { known.reserveCapacity(knownCount) }
        for _ in 0..<knownCount { known.append(try reader.readRevisionID("changesReply.knownAncestor")) }
        return ChangesReplyItem(missing: missing, knownAncestors: known)
    }
}
