/// `revisionsAck` (§6.7): the target acknowledges all `revisions` of one `changes` request. It MUST
/// be sent only after every revision of the request is durable (or definitively refused), because
/// the source may advance its checkpoint on it. With status 2 it also names the documents of the
/// request it refused, so the source's side can report them.
///
/// | field | type | meaning |
/// | --- | --- | --- |
/// | requestID | varint | the `changes` request acknowledged |
/// | status | u8 | 0 ok; 1 rejected; 2 ok, with documents refused (only to a peer with the `refusals` feature) |
/// | code | u16 | only when rejected: a request error code (§8) |
/// | message | string | only when rejected: 0...errorMessageBytesMax bytes for humans |
/// | refusalCount | varint | only with status 2: 1...batchRevisionsMax |
/// | refusals | refusal × refusalCount | only with status 2: `string docID ‖ string reason` (reason 0...errorMessageBytesMax bytes) |
public struct RevisionsAck: WireMessageBody {
    public static let messageType = MessageType.revisionsAck

    /// A document of the batch the target refused, and why (for people).
    public struct Refusal: Equatable, Sendable {
        public var documentID: String
        public var reason: String

        public init(documentID: String, reason: String) {
            self.documentID = documentID
            self.reason = reason
        }
    }

    /// The outcome of the batch.
    public enum Status: Equatable, Sendable {
        /// Every revision is durable.
        case ok
        /// The batch was not stored; the source must not advance its checkpoint past it.
        case rejected(code: ErrorCode, message: String)
        /// Every revision but those of the refused documents is durable; the refused ones will
        /// not be asked for again (the source may advance its checkpoint, as for `ok`).
        case okWithRefusals([Refusal])
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
        case .okWithRefusals(let refusals):
            precondition((1...WireLimits.batchRevisionsMax).contains(refusals.count), "refusal count out of range")
            writer.writeByte(2)
            writer.writeVarint(UInt64(refusals.count))
            for refusal in refusals {
                writer.writeString(refusal.documentID, maxBytes: WireLimits.docIDBytesMax)
                writer.writeString(refusal.reason, maxBytes: WireLimits.errorMessageBytesMax)
            }
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
        case 2:
            let count = try reader.readVarint("revisionsAck.refusalCount", in: 1...WireLimits.batchRevisionsMax)
            var refusals: [Refusal] = []
            refusals.reserveCapacity(count)
            for _ in 0..<count {
                let documentID = try reader.readString("revisionsAck.docID", in: 1...WireLimits.docIDBytesMax)
                let reason = try reader.readString("revisionsAck.reason", in: 0...WireLimits.errorMessageBytesMax)
                refusals.append(Refusal(documentID: documentID, reason: reason))
            }
            self.status = .okWithRefusals(refusals)
        default:
            throw .invalidValue(field: "revisionsAck.status", value: UInt64(status))
        }
    }
}
