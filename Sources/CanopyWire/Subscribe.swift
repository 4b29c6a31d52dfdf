/// What a subscriber asks the source to send (§6.2).
///
/// On the wire: `u8 kind` (0 none, 1 docIDs, 2 idPrefix) followed by, for `docIDs`,
/// `varint count (1...filterDocIDsMax) ‖ string × count` and, for `idPrefix`, one `string`. Every
/// id and the prefix are 1...docIDBytesMax bytes.
public enum ChangesFilter: Equatable, Sendable {
    /// Every document.
    case none
    /// Only these document ids.
    case docIDs([String])
    /// Only documents whose id starts with this prefix (byte-wise on UTF-8).
    case idPrefix(String)
}

/// `subscribe` (§6.2), a request from the side that wants changes (the target) to the side that
/// has them (the source): "send me your changes since `since`". The source answers with a stream
/// of `changes` requests that carry this request's id as their `subscriptionID`, or with `error`
/// naming this request id if it refuses.
///
/// | field | type | meaning |
/// | --- | --- | --- |
/// | requestID | varint | ≥ 1; becomes the subscription id |
/// | replicationID | bytes | 1...replicationIDBytesMax |
/// | since | varint | the source sequence already received (0: from the start) |
/// | flags | u8 | bit 0 `continuous`: keep sending as new changes commit |
/// | filter | filter | see `ChangesFilter` |
public struct Subscribe: WireMessageBody {
    public static let messageType = MessageType.subscribe
    /// Flag bit: keep the subscription open after catching up.
    static let continuousFlag: UInt8 = 0x01

    public var requestID: RequestID
    public var replicationID: [UInt8]
    public var since: UInt64
    public var continuous: Bool
    public var filter: ChangesFilter

    public init(requestID: RequestID, replicationID: [UInt8], since: UInt64, continuous: Bool, filter: ChangesFilter) {
        precondition(requestID >= 1, "request ids start at 1")
        self.requestID = requestID
        self.replicationID = replicationID
        self.since = since
        self.continuous = continuous
        self.filter = filter
    }

    public func encode(into writer: inout ByteWriter) {
        writer.writeVarint(requestID)
        writer.writeReplicationID(replicationID)
        writer.writeVarint(since)
        writer.writeByte(continuous ? Subscribe.continuousFlag : 0)
        switch filter {
        case .none:
            writer.writeByte(0)
        case .docIDs(let ids):
            precondition((1...WireLimits.filterDocIDsMax).contains(ids.count), "filter id count out of range")
            writer.writeByte(1)
            writer.writeVarint(UInt64(ids.count))
            for id in ids { writer.writeDocID(id) }
        case .idPrefix(let prefix):
            writer.writeByte(2)
            writer.writeDocID(prefix)
        }
    }

    public init(from reader: inout ByteReader) throws(ProtocolError) {
        requestID = try reader.readRequestID("subscribe.requestID")
        replicationID = try reader.readReplicationID("subscribe.replicationID")
        since = try reader.readVarint("subscribe.since")
        let flags = try reader.readByte("subscribe.flags")
        guard flags & ~Subscribe.continuousFlag == 0 else { throw .invalidValue(field: "subscribe.flags", value: UInt64(flags)) }
        continuous = flags & Subscribe.continuousFlag != 0
        let kind = try reader.readByte("subscribe.filter")
        switch kind {
        case 0:
            filter = .none
        case 1:
            let count = try reader.readVarint("subscribe.filter.count", in: 1...WireLimits.filterDocIDsMax)
            var ids: [String] = []
            ids.reserveCapacity(min(count, reader.remainingCount / 2))
            for _ in 0..<count { ids.append(try reader.readDocID("subscribe.filter.docID")) }
            filter = .docIDs(ids)
        case 2:
            filter = .idPrefix(try reader.readDocID("subscribe.filter.prefix"))
        default:
            throw .invalidValue(field: "subscribe.filter", value: UInt64(kind))
        }
    }
}

/// `unsubscribe` (§6.3): the target ends a subscription. The source sends no new `changes` for it;
/// batches already in flight complete normally.
///
/// | field | type | meaning |
/// | --- | --- | --- |
/// | subscriptionID | varint | the `requestID` of the `subscribe` |
public struct Unsubscribe: WireMessageBody {
    public static let messageType = MessageType.unsubscribe
    public var subscriptionID: RequestID

    public init(subscriptionID: RequestID) {
        self.subscriptionID = subscriptionID
    }

    public func encode(into writer: inout ByteWriter) {
        writer.writeVarint(subscriptionID)
    }

    public init(from reader: inout ByteReader) throws(ProtocolError) {
        subscriptionID = try reader.readRequestID("unsubscribe.subscriptionID")
    }
}

extension ByteWriter {
    /// Writes a document id (1...docIDBytesMax UTF-8 bytes).
    mutating func writeDocID(_ id: String) {
        precondition(!id.utf8.isEmpty, "empty document id")
        writeString(id, maxBytes: WireLimits.docIDBytesMax)
    }
}

extension ByteReader {
    /// Reads a document id: valid UTF-8 of 1...docIDBytesMax bytes.
    mutating func readDocID(_ field: String) throws(ProtocolError) -> String {
        try readString(field, in: 1...WireLimits.docIDBytesMax)
    }

    /// Reads a request id, which is never 0.
    mutating func readRequestID(_ field: String) throws(ProtocolError) -> RequestID {
        let id = try readVarint(field)
        guard id >= 1 else { throw .invalidValue(field: field, value: 0) }
        return id
    }
}
