/// `revisionsAck` (§6.7): the target acknowledges all `revisions` of one `changes` request. It MUST
/// be sent only after every revision of the request is durable (or definitively refused), because
/// the source may advance its checkpoint on it. It carries nothing else.
///
/// | field | type | meaning |
/// | --- | --- | --- |
/// | requestID | varint | the `changes` request acknowledged |
/// | status | u8 | 0 ok; 1 rejected |
/// | code | u16 | only when rejected: a request error code (§8) |
/// | message | string | only when rejected: 0...errorMessageBytesMax bytes for humans |
public struct RevisionsAck: WireMessageBody {
    public static let messageType = MessageType.revisionsAck

    /// The outcome of the batch.
    public enum Status: Equatable, Sendable {
        /// Every revision is durable.
        case ok
        /// The batch was not stored; the source must not advance its checkpoint past it.
        case rejected(code: ErrorCode, message: String)
    }

    public var requestID: RequestID
    public var status: Status

    public init(requestID: RequestID, status: Status) {
        self.requestID = requestID
        self.status = status
    }

    public func encode(into writer: inout ByteWriter) {
        writer.writeVarint(requestID)
        switch status {
        case .ok:
            writer.writeByte(0)
        case .rejected(let code, let message):
            writer.writeByte(1)
            writer.writeUInt16(code.rawValue)
            writer.writeString(message, maxBytes: WireLimits.errorMessageBytesMax)
        }
    }

    public init(from reader: inout ByteReader) throws(ProtocolError) {
        requestID = try reader.readRequestID("revisionsAck.requestID")
        let status = try reader.readByte("revisionsAck.status")
        switch status {
        case 0:
            self.status = .ok
        case 1:
            let code = ErrorCode(rawValue: try reader.readUInt16("revisionsAck.code"))
            let message = try reader.readString("revisionsAck.message", in: 0...WireLimits.errorMessageBytesMax)
            self.status = .rejected(code: code, message: message)
        default:
            throw .invalidValue(field: "revisionsAck.status", value: UInt64(status))
        }
    }
}
