/// The type byte that opens every message (§6). Values are fixed for protocol version 1; a type
/// byte not listed here is `unknownMessageType`, a fatal error (§11 explains why that is safe).
public enum MessageType: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    case hello = 0x01
    case subscribe = 0x02
    case unsubscribe = 0x03
    case changes = 0x04
    case changesReply = 0x05
    case revisions = 0x06
    case revisionsAck = 0x07
    case checkpointGet = 0x08
    case checkpoint = 0x09
    case checkpointSet = 0x0A
    case checkpointSetAck = 0x0B
    case heartbeat = 0x0C
    case heartbeatEcho = 0x0D
    case error = 0x0E
    case close = 0x0F
    case attachmentGet = 0x14
    case attachmentPart = 0x15
    case digestGet = 0x16
    case digestNodes = 0x17

    public var description: String {
        switch self {
        case .hello: return "hello"
        case .subscribe: return "subscribe"
        case .unsubscribe: return "unsubscribe"
        case .changes: return "changes"
        case .changesReply: return "changesReply"
        case .revisions: return "revisions"
        case .revisionsAck: return "revisionsAck"
        case .checkpointGet: return "checkpointGet"
        case .checkpoint: return "checkpoint"
        case .checkpointSet: return "checkpointSet"
        case .checkpointSetAck: return "checkpointSetAck"
        case .heartbeat: return "heartbeat"
        case .heartbeatEcho: return "heartbeatEcho"
        case .error: return "error"
        case .close: return "close"
        case .attachmentGet: return "attachmentGet"
        case .attachmentPart: return "attachmentPart"
        case .digestGet: return "digestGet"
        case .digestNodes: return "digestNodes"
        }
    }
}

/// The body of one message type: its layout in both directions. `encode` writes only the body
/// (the type byte is written by `Message`); `init(from:)` reads exactly the body and leaves the
/// check for trailing bytes to `Message.decode`.
public protocol WireMessageBody: Equatable, Sendable {
    /// The type byte of this message.
    static var messageType: MessageType { get }
    /// Appends the body's bytes. Values outside the protocol's limits are programmer errors.
    func encode(into writer: inout ByteWriter)
    /// Reads the body, checking every length and count before allocating.
    init(from reader: inout ByteReader) throws(ProtocolError)
}

/// A request id: chosen by the requester, unique among its outstanding requests, never 0 (0 means
/// "no request" in `error`). Replies echo it.
public typealias RequestID = UInt64
