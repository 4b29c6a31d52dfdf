/// A violation of the wire protocol by the peer (`Protocol/design.md` §9.3: the first kind of error). Every case is
/// fatal: the receiver sends `close` with `code` (when the channel still works) and drops the
/// connection. Nothing received on the connection after the violation is processed.
///
/// Cases carry what was wrong and where (a field name, a count and its limit), never the peer's
/// payload bytes, so logging one is always safe and bounded.
public enum ProtocolError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A frame's length prefix is below the minimum.
    case frameTooShort(declaredBytes: Int, minBytes: Int)
    /// A frame's length prefix is above the maximum; nothing was buffered for it.
    case frameTooLong(declaredBytes: Int, maxBytes: Int)
    /// A decrypted frame plaintext is empty (it must hold at least its flags byte).
    case emptyPlaintext
    /// A fragment's flags byte has reserved bits set.
    case reservedFragmentFlags(UInt8)
    /// Reassembling a message would exceed `WireLimits.messageBytesMax`.
    case messageTooLong(bytes: Int, maxBytes: Int)
    /// A message ended before `field` was complete.
    case truncated(field: String)
    /// A varint in `field` is longer than 10 bytes, exceeds 64 bits, or is not minimal.
    case malformedVarint(field: String)
    /// A message has bytes left over after its last field.
    case trailingBytes(messageType: UInt8, count: Int)
    /// The message type byte is not defined by the negotiated version.
    case unknownMessageType(UInt8)
    /// `field` holds `value`, above its limit `max` (or below its minimum `min`).
    case outOfRange(field: String, value: UInt64, min: UInt64, max: UInt64)
    /// `field` is not valid UTF-8.
    case invalidUTF8(field: String)
    /// `field` has reserved bits set, or an enumeration value this version does not define.
    case invalidValue(field: String, value: UInt64)
    /// A revision in `field` has generation outside 1...`RevisionID.generationMax`.
    case invalidRevisionGeneration(field: String, generation: UInt64)
    /// A revision in `field` has a kind byte that is not a `RevisionKind`.
    case invalidRevisionKind(field: String, kind: UInt64)
    /// A revision's ancestry is inconsistent with its generation or with what the receiver said it
    /// has (`detail` says how).
    case invalidAncestry(detail: String)
    /// A message arrived in a state where it is not valid.
    case unexpectedMessage(messageType: String, state: String)
    /// The peer offered no protocol version we speak.
    case unsupportedVersion(offered: UInt64)
    /// A reply or ack names no request we have outstanding, or a request id is reused.
    case unknownRequest(messageType: String, requestID: UInt64)
    /// A request reuses the id of a request still outstanding.
    case duplicateRequestID(requestID: UInt64)
    /// A message refers to an entry, revision or subscription that does not exist or was not
    /// asked for (`detail` says which).
    case invalidReference(detail: String)
    /// The peer has more requests outstanding than the window we gave it.
    case windowExceeded(what: String, limit: Int)
    /// A document the peer sent was refused by the receiver's checks (a revision id that is not
    /// the hash of its content, a body that is not a canonical JSON object): the engine found it,
    /// the connection closes with `invalidDocument`, and nothing of the batch is written.
    case invalidDocument(detail: String)

    /// The code sent in `close` for this violation.
    public var code: ErrorCode {
        switch self {
        case .frameTooShort, .frameTooLong, .emptyPlaintext, .reservedFragmentFlags: return .malformedFrame
        case .messageTooLong, .outOfRange: return .limitExceeded
        case .truncated, .malformedVarint, .trailingBytes, .invalidUTF8, .invalidValue: return .malformedMessage
        case .unknownMessageType: return .unknownMessageType
        case .invalidRevisionGeneration, .invalidRevisionKind, .invalidAncestry: return .invalidRevision
        case .unexpectedMessage: return .unexpectedMessage
        case .unsupportedVersion: return .unsupportedVersion
        case .unknownRequest, .duplicateRequestID, .invalidReference: return .invalidReference
        case .windowExceeded: return .windowExceeded
        case .invalidDocument: return .invalidDocument
        }
    }

    public var description: String {
        switch self {
        case .frameTooShort(let bytes, let min): return "frame length \(bytes) below minimum \(min)"
        case .frameTooLong(let bytes, let max): return "frame length \(bytes) above maximum \(max)"
        case .emptyPlaintext: return "empty frame plaintext"
        case .reservedFragmentFlags(let flags): return "reserved fragment flag bits in 0x\(String(flags, radix: 16))"
        case .messageTooLong(let bytes, let max): return "message of \(bytes)+ bytes above maximum \(max)"
        case .truncated(let field): return "message truncated in \(field)"
        case .malformedVarint(let field): return "malformed varint in \(field)"
        case .trailingBytes(let type, let count): return "\(count) trailing bytes after message type \(type)"
        case .unknownMessageType(let type): return "unknown message type \(type)"
        case .outOfRange(let field, let value, let min, let max): return "\(field) = \(value) outside \(min)...\(max)"
        case .invalidUTF8(let field): return "\(field) is not valid UTF-8"
        case .invalidValue(let field, let value): return "\(field) has invalid value \(value)"
        case .invalidRevisionGeneration(let field, let generation): return "\(field): invalid revision generation \(generation)"
        case .invalidRevisionKind(let field, let kind): return "\(field): invalid revision kind \(kind)"
        case .invalidAncestry(let detail): return "invalid ancestry: \(detail)"
        case .unexpectedMessage(let type, let state): return "\(type) not valid in state \(state)"
        case .unsupportedVersion(let offered): return "unsupported protocol version \(offered)"
        case .unknownRequest(let type, let id): return "\(type) answers unknown request \(id)"
        case .duplicateRequestID(let id): return "request id \(id) already outstanding"
        case .invalidReference(let detail): return "invalid reference: \(detail)"
        case .windowExceeded(let what, let limit): return "more than \(limit) outstanding \(what)"
        case .invalidDocument(let detail): return "invalid document: \(detail)"
        }
    }
}
