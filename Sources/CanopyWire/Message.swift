/// A whole protocol message (§6): `u8 type ‖ body`. This is what the message assembler's output
/// decodes to and what the state machine consumes.
public enum Message: Equatable, Sendable {
    case hello(Hello)
    case subscribe(Subscribe)
    case unsubscribe(Unsubscribe)
    case changes(Changes)
    case changesReply(ChangesReply)
    case revisions(Revisions)
    case revisionsAck(RevisionsAck)
    case checkpointGet(CheckpointGet)
    case checkpoint(Checkpoint)
    case checkpointSet(CheckpointSet)
    case checkpointSetAck(CheckpointSetAck)
    case heartbeat
    case heartbeatEcho
    case error(ErrorMessage)
    case close(Close)
    case attachmentGet(AttachmentGet)
    case attachmentPart(AttachmentPart)
    case digestGet(DigestGet)
    case digestNodes(DigestNodes)

    /// The type byte of this message.
    public var type: MessageType {
        switch self {
        case .hello: return .hello
        case .subscribe: return .subscribe
        case .unsubscribe: return .unsubscribe
        case .changes: return .changes
        case .changesReply: return .changesReply
        case .revisions: return .revisions
        case .revisionsAck: return .revisionsAck
        case .checkpointGet: return .checkpointGet
        case .checkpoint: return .checkpoint
        case .checkpointSet: return .checkpointSet
        case .checkpointSetAck: return .checkpointSetAck
        case .heartbeat: return .heartbeat
        case .heartbeatEcho: return .heartbeatEcho
        case .error: return .error
        case .close: return .close
        case .attachmentGet: return .attachmentGet
        case .attachmentPart: return .attachmentPart
        case .digestGet: return .digestGet
        case .digestNodes: return .digestNodes
        }
    }

    /// The message's bytes: type byte, then body.
    public func encoded() -> [UInt8] {
        var writer = ByteWriter(capacity: 64)
        encode(into: &writer)
        return writer.bytes
    }

    /// Appends the message's bytes (type byte, then body) to `writer`, after whatever it holds:
    /// the fragmenter puts a frame's flags byte first, so a message that fits one frame is
    /// encoded straight into its plaintext.
    public func encode(into writer: inout ByteWriter) {
        writer.writeByte(type.rawValue)
        switch self {
        case .hello(let body): body.encode(into: &writer)
        case .subscribe(let body): body.encode(into: &writer)
        case .unsubscribe(let body): body.encode(into: &writer)
        case .changes(let body): body.encode(into: &writer)
        case .changesReply(let body): body.encode(into: &writer)
        case .revisions(let body): body.encode(into: &writer)
        case .revisionsAck(let body): body.encode(into: &writer)
        case .checkpointGet(let body): body.encode(into: &writer)
        case .checkpoint(let body): body.encode(into: &writer)
        case .checkpointSet(let body): body.encode(into: &writer)
        case .checkpointSetAck(let body): body.encode(into: &writer)
        case .heartbeat, .heartbeatEcho: break
        case .error(let body): body.encode(into: &writer)
        case .close(let body): body.encode(into: &writer)
        case .attachmentGet(let body): body.encode(into: &writer)
        case .attachmentPart(let body): body.encode(into: &writer)
        case .digestGet(let body): body.encode(into: &writer)
        case .digestNodes(let body): body.encode(into: &writer)
        }
    }

    /// Decodes one whole message. Every byte must belong to it: trailing bytes are an error, as
    /// is an unknown type byte (§11).
    public static func decode(_ bytes: [UInt8]) throws(ProtocolError) -> Message {
        try decode(bytes[...])
    }

    /// Decodes one whole message from a slice (a frame's plaintext after its flags byte, with no
    /// copy). Every byte must belong to it.
    public static func decode(_ bytes: ArraySlice<UInt8>) throws(ProtocolError) -> Message {
        var reader = ByteReader(bytes)
        let typeByte = try reader.readByte("message type")
        guard let type = MessageType(rawValue: typeByte) else { throw .unknownMessageType(typeByte) }
        let message: Message
        switch type {
        case .hello: message = .hello(try Hello(from: &reader))
        case .subscribe: message = .subscribe(try Subscribe(from: &reader))
        case .unsubscribe: message = .unsubscribe(try Unsubscribe(from: &reader))
        case .changes: message = .changes(try Changes(from: &reader))
        case .changesReply: message = .changesReply(try ChangesReply(from: &reader))
        case .revisions: message = .revisions(try Revisions(from: &reader))
        case .revisionsAck: message = .revisionsAck(try RevisionsAck(from: &reader))
        case .checkpointGet: message = .checkpointGet(try CheckpointGet(from: &reader))
        case .checkpoint: message = .checkpoint(try Checkpoint(from: &reader))
        case .checkpointSet: message = .checkpointSet(try CheckpointSet(from: &reader))
        case .checkpointSetAck: message = .checkpointSetAck(try CheckpointSetAck(from: &reader))
        case .heartbeat: message = .heartbeat
        case .heartbeatEcho: message = .heartbeatEcho
        case .error: message = .error(try ErrorMessage(from: &reader))
        case .close: message = .close(try Close(from: &reader))
        case .attachmentGet: message = .attachmentGet(try AttachmentGet(from: &reader))
        case .attachmentPart: message = .attachmentPart(try AttachmentPart(from: &reader))
        case .digestGet: message = .digestGet(try DigestGet(from: &reader))
        case .digestNodes: message = .digestNodes(try DigestNodes(from: &reader))
        }
        try reader.expectEnd(messageType: typeByte)
        return message
    }
}
