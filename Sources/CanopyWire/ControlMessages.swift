/// `heartbeat` (§6.9): sent by a side that has sent nothing for heartbeatIntervalSeconds. Empty
/// body. The receiver answers with `heartbeatEcho`, so each side also learns the path works in the
/// direction it cannot observe.
public struct Heartbeat: WireMessageBody {
    public static let messageType = MessageType.heartbeat
    public init() {}
    public func encode(into writer: inout ByteWriter) {}
    public init(from reader: inout ByteReader) throws(ProtocolError) {}
}

/// `heartbeatEcho` (§6.9): the answer to `heartbeat`. Empty body. An unsolicited echo is ignored.
public struct HeartbeatEcho: WireMessageBody {
    public static let messageType = MessageType.heartbeatEcho
    public init() {}
    public func encode(into writer: inout ByteWriter) {}
    public init(from reader: inout ByteReader) throws(ProtocolError) {}
}

/// `error` (§6.10): a request failed (a request error code, §8), or — with requestID 0 — a
/// non-fatal condition worth reporting. The connection stays up; fatal conditions use `close`.
///
/// | field | type | meaning |
/// | --- | --- | --- |
/// | requestID | varint | the failed request, or 0 |
/// | code | u16 | an error code (§8) |
/// | message | string | 0...errorMessageBytesMax bytes for humans; never parsed |
public struct ErrorMessage: WireMessageBody {
    public static let messageType = MessageType.error
    public var requestID: RequestID
    public var code: ErrorCode
    public var message: String

    public init(requestID: RequestID, code: ErrorCode, message: String) {
        self.requestID = requestID
        self.code = code
        self.message = message
    }

    public func encode(into writer: inout ByteWriter) {
        writer.writeVarint(requestID)
        writer.writeUInt16(code.rawValue)
        writer.writeString(message, maxBytes: WireLimits.errorMessageBytesMax)
    }

    public init(from reader: inout ByteReader) throws(ProtocolError) {
        requestID = try reader.readVarint("error.requestID")
        code = ErrorCode(rawValue: try reader.readUInt16("error.code"))
        message = try reader.readString("error.message", in: 0...WireLimits.errorMessageBytesMax)
    }
}

/// `close` (§6.11): the last message a side sends; it is sent in the frame with the secretstream
/// FINAL tag. The code says whether this is a normal end (0x00xx) or why the connection failed.
///
/// | field | type | meaning |
/// | --- | --- | --- |
/// | code | u16 | an error code (§8) |
/// | reason | string | 0...errorMessageBytesMax bytes for humans |
public struct Close: WireMessageBody {
    public static let messageType = MessageType.close
    public var code: ErrorCode
    public var reason: String

    public init(code: ErrorCode, reason: String) {
        self.code = code
        self.reason = reason
    }

    public func encode(into writer: inout ByteWriter) {
        writer.writeUInt16(code.rawValue)
        writer.writeString(reason, maxBytes: WireLimits.errorMessageBytesMax)
    }

    public init(from reader: inout ByteReader) throws(ProtocolError) {
        code = ErrorCode(rawValue: try reader.readUInt16("close.code"))
        reason = try reader.readString("close.reason", in: 0...WireLimits.errorMessageBytesMax)
    }
}
