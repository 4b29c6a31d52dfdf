/// The attachment messages (§6.12): a target fetches the content a revision's `_attachments`
/// names from the source that sent the revision, a part at a time. Only between sides that both
/// set the `attachments` feature bit in `hello`.
///
/// `attachmentGet`: `varint requestID ‖ 32 bytes digest ‖ varint offset ‖ varint maxBytes`
/// (1...attachmentPartBytesMax) — up to `maxBytes` of the content whose BLAKE2b-256 digest is
/// `digest`, from byte `offset`.
/// `attachmentPart` (its reply): `varint requestID ‖ varint length ‖ bytes data`
/// (0...attachmentPartBytesMax) — the content's whole length, and the bytes from the requested
/// offset: `min(maxBytes, length − offset)` of them, none when the offset is at or past the end.
/// A source that does not hold the content answers `error` with `notFound`.
public struct AttachmentGet: WireMessageBody {
    public static let messageType = MessageType.attachmentGet
    public var requestID: RequestID
    /// The content's BLAKE2b-256 digest (32 bytes).
    public var digest: [UInt8]
    public var offset: UInt64
    public var maxBytes: Int

    public init(requestID: RequestID, digest: [UInt8], offset: UInt64, maxBytes: Int) {
        precondition(digest.count == WireLimits.attachmentDigestBytes, "an attachment digest has 32 bytes")
        self.requestID = requestID
        self.digest = digest
        self.offset = offset
        self.maxBytes = maxBytes
    }

    public func encode(into writer: inout ByteWriter) {
        precondition((1...WireLimits.attachmentPartBytesMax).contains(maxBytes), "maxBytes out of range")
        writer.writeVarint(requestID)
        writer.writeRaw(digest)
        writer.writeVarint(offset)
        writer.writeVarint(UInt64(maxBytes))
    }

    public init(from reader: inout ByteReader) throws(ProtocolError) {
        requestID = try reader.readRequestID("attachmentGet.requestID")
        digest = Array(try reader.readRaw(WireLimits.attachmentDigestBytes, "attachmentGet.digest"))
        offset = try reader.readVarint("attachmentGet.offset")
        maxBytes = try reader.readVarint("attachmentGet.maxBytes", in: 1...WireLimits.attachmentPartBytesMax)
    }
}

/// `attachmentPart`: the reply to `attachmentGet`.
public struct AttachmentPart: WireMessageBody {
    public static let messageType = MessageType.attachmentPart
    public var requestID: RequestID
    /// The content's whole length in bytes.
    public var length: UInt64
    public var data: [UInt8]

    public init(requestID: RequestID, length: UInt64, data: [UInt8]) {
        self.requestID = requestID
        self.length = length
        self.data = data
    }

    public func encode(into writer: inout ByteWriter) {
        writer.reserve(additional: data.count + 24)
        writer.writeVarint(requestID)
        writer.writeVarint(length)
        writer.writeLengthPrefixed(data, maxBytes: WireLimits.attachmentPartBytesMax)
    }

    public init(from reader: inout ByteReader) throws(ProtocolError) {
        requestID = try reader.readRequestID("attachmentPart.requestID")
        length = try reader.readVarint("attachmentPart.length")
        data = try reader.readLengthPrefixed("attachmentPart.data", in: 0...WireLimits.attachmentPartBytesMax)
    }
}
