import CanopyCore

/// A channel id on a multiplexed connection (`replication-v2.md` §3): the handshake initiator
/// opens odd ids, the responder even ids, each counting up; 0 is never used, and no id is used
/// twice on one connection.
package typealias ChannelID = UInt64

/// The type bytes version 2 adds (`replication-v2.md` §3). They are valid only on a connection
/// whose two connection `hello`s both said version 2 or more; version 1's `Message.decode` keeps
/// refusing them as `unknownMessageType`.
package enum ConnectionMessageType: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    case attach = 0x10
    case detach = 0x11
    case channel = 0x12

    package var description: String {
        switch self {
        case .attach: return "attach"
        case .detach: return "detach"
        case .channel: return "channel"
        }
    }
}

/// The connection `hello` of version 2 (`replication-v2.md` §2): version 1's `hello`, same
/// layout and codec, the first message each side sends on the connection, with three fields read
/// differently. Every field stays within version 1's bounds, so a version-1 node accepts it as
/// its own `hello`, answers with its own, and is refused with a reason both sides record.
///
/// | field | type | meaning |
/// | --- | --- | --- |
/// | version | varint | highest version the sender speaks, ≥ 2 on a multiplexed connection |
/// | features | varint | connection features; none defined, unknown bits ignored |
/// | nodeID | 16 bytes | in v1's `databaseID`: an id the sender picks per node; equal ids mean a node reached itself |
/// | channelsMax | varint | in v1's `revsLimit`: 1...`WireLimits.channelsMax` channels the sender accepts at once |
/// | window | varint | 1...inFlightBatchesMax; written 1, ignored (kept so the encoding round-trips) |
package struct ConnectionHello: Equatable, Sendable {
    /// The fields, as version 1 names them.
    package var hello: Hello

    package init(version: UInt64 = WireLimits.multiplexedProtocolVersion, features: UInt64 = 0, nodeID: [UInt8],
                 channelsMax: Int = WireLimits.channelsMax) {
        precondition((1...WireLimits.channelsMax).contains(channelsMax), "channelsMax out of range")
        hello = Hello(version: version, features: features, databaseID: nodeID, revsLimit: channelsMax, window: 1)
    }

    /// The `hello` a version-1 node sends first on its connections, as it arrives here.
    package init(hello: Hello) {
        self.hello = hello
    }

    package var version: UInt64 { hello.version }
    package var nodeID: [UInt8] { hello.databaseID }
    /// Up to `WireLimits.revsLimitMax` as decoded; `MultiplexStateMachine` refuses more than
    /// `WireLimits.channelsMax` from a version-2 peer (a version-1 peer is refused for its version).
    package var channelsMax: Int { hello.revsLimit }

    /// Appends the body (after the type byte 0x01).
    package func encode(into writer: inout ByteWriter) {
        hello.encode(into: &writer)
    }

    /// Reads the body with version 1's bounds: a version-1 peer's `hello` decodes too; refusing
    /// it is the state machine's decision, with a clear reason.
    package init(from reader: inout ByteReader) throws(ProtocolError) {
        hello = try Hello(from: &reader)
    }
}

/// `attach` (0x10): opens channel `channel` for `database`, or — the same id and name echoed —
/// accepts the peer's `attach`.
///
/// | field | type | meaning |
/// | --- | --- | --- |
/// | channel | varint | ≥ 1 |
/// | database | string | a `DatabaseName` (CanopyCore: CouchDB's rule) |
package struct Attach: Equatable, Sendable {
    package var channel: ChannelID
    package var database: DatabaseName

    package init(channel: ChannelID, database: DatabaseName) {
        precondition(channel >= 1, "channel ids start at 1")
        self.channel = channel
        self.database = database
    }

    package func encode(into writer: inout ByteWriter) {
        writer.writeVarint(channel)
        writer.writeString(database.text, maxBytes: WireLimits.databaseNameBytesMax)
    }

    package init(from reader: inout ByteReader) throws(ProtocolError) {
        channel = try reader.readChannelID("attach.channel")
        let name = try reader.readLengthPrefixed("attach.database", in: 1...WireLimits.databaseNameBytesMax)
        // Bytes that are not UTF-8 decode to U+FFFD, which the rule (ASCII only) refuses too.
        guard let database = DatabaseName(validating: String(decoding: name, as: UTF8.self)) else {
            throw .invalidValue(field: "attach.database", value: UInt64(name.first ?? 0))
        }
        self.database = database
    }
}

/// `detach` (0x11): refuses the peer's `attach`, closes an open channel, or answers the peer's
/// `detach`. After a side has both sent and received a `detach` for an id, the id is dead.
///
/// | field | type | meaning |
/// | --- | --- | --- |
/// | channel | varint | ≥ 1 |
/// | code | varint | an error code (§8 of v1), ≤ 0xFFFF |
/// | message | string | 0...errorMessageBytesMax bytes for humans |
package struct Detach: Equatable, Sendable {
    package var channel: ChannelID
    package var code: ErrorCode
    package var message: String

    package init(channel: ChannelID, code: ErrorCode, message: String) {
        precondition(channel >= 1, "channel ids start at 1")
        self.channel = channel
        self.code = code
        self.message = message.truncatedToUTF8(bytes: WireLimits.errorMessageBytesMax)
    }

    package func encode(into writer: inout ByteWriter) {
        writer.writeVarint(channel)
        writer.writeVarint(UInt64(code.rawValue))
        writer.writeString(message, maxBytes: WireLimits.errorMessageBytesMax)
    }

    package init(from reader: inout ByteReader) throws(ProtocolError) {
        channel = try reader.readChannelID("detach.channel")
        let code = try reader.readVarint("detach.code")
        guard code <= UInt64(UInt16.max) else { throw .invalidValue(field: "detach.code", value: code) }
        self.code = ErrorCode(rawValue: UInt16(code))
        message = try reader.readString("detach.message", in: 0...WireLimits.errorMessageBytesMax)
    }
}

extension ByteReader {
    /// Reads a channel id: a varint ≥ 1 (0 is `malformedMessage`).
    mutating func readChannelID(_ field: String) throws(ProtocolError) -> ChannelID {
        let channel = try readVarint(field)
        guard channel >= 1 else { throw .invalidValue(field: field, value: 0) }
        return channel
    }
}

/// One message of a multiplexed connection (`replication-v2.md`): the connection-level messages
/// (its `hello`, heartbeats, `error`, `close`), `attach` and `detach`, and `channel` carrying one
/// whole version-1 message of the database session on that channel.
///
/// A separate type from `Message`, so version 1's messages, their decoder and its performance
/// are untouched: `channel`'s inner message is decoded by `Message.decode` from a slice of the
/// envelope, without a copy.
package enum ConnectionMessage: Equatable, Sendable {
    case hello(ConnectionHello)
    case heartbeat
    case heartbeatEcho
    case error(ErrorMessage)
    case close(Close)
    case attach(Attach)
    case detach(Detach)
    case channel(ChannelID, Message)

    /// The message's name, as the spec's tables write it.
    package var name: String {
        switch self {
        case .hello: return MessageType.hello.description
        case .heartbeat: return MessageType.heartbeat.description
        case .heartbeatEcho: return MessageType.heartbeatEcho.description
        case .error: return MessageType.error.description
        case .close: return MessageType.close.description
        case .attach: return ConnectionMessageType.attach.description
        case .detach: return ConnectionMessageType.detach.description
        case .channel: return ConnectionMessageType.channel.description
        }
    }

    /// The message's bytes: type byte, then body.
    package func encoded() -> [UInt8] {
        var writer = ByteWriter(capacity: 64)
        encode(into: &writer)
        return writer.bytes
    }

    /// Appends the message's bytes to `writer` (after a frame's flags byte, say). A `channel`
    /// writes its envelope and then the inner message in place.
    package func encode(into writer: inout ByteWriter) {
        switch self {
        case .hello(let hello):
            writer.writeByte(MessageType.hello.rawValue)
            hello.encode(into: &writer)
        case .heartbeat: Message.heartbeat.encode(into: &writer)
        case .heartbeatEcho: Message.heartbeatEcho.encode(into: &writer)
        case .error(let error): Message.error(error).encode(into: &writer)
        case .close(let close): Message.close(close).encode(into: &writer)
        case .attach(let attach):
            writer.writeByte(ConnectionMessageType.attach.rawValue)
            attach.encode(into: &writer)
        case .detach(let detach):
            writer.writeByte(ConnectionMessageType.detach.rawValue)
            detach.encode(into: &writer)
        case .channel(let channel, let message):
            writer.writeByte(ConnectionMessageType.channel.rawValue)
            writer.writeVarint(channel)
            message.encode(into: &writer)
        }
    }

    /// Decodes one whole message of a version-2 connection.
    package static func decode(_ bytes: [UInt8]) throws(ProtocolError) -> ConnectionMessage {
        try decode(bytes[...])
    }

    /// Decodes one whole message of a version-2 connection from a slice. Version-1 types other
    /// than the connection-level ones are `unexpectedMessage` outside a channel; a type neither
    /// version defines is `unknownMessageType`; every byte must belong to the message.
    package static func decode(_ bytes: ArraySlice<UInt8>) throws(ProtocolError) -> ConnectionMessage {
        var reader = ByteReader(bytes)
        let typeByte = try reader.readByte("message type")
        let message: ConnectionMessage
        if let type = ConnectionMessageType(rawValue: typeByte) {
            switch type {
            case .attach: message = .attach(try Attach(from: &reader))
            case .detach: message = .detach(try Detach(from: &reader))
            case .channel:
                let channel = try reader.readChannelID("channel.channel")
                let inner = try reader.readRaw(reader.remainingCount, "channel.message")
                return .channel(channel, try Message.decode(inner))
            }
        } else {
            guard let type = MessageType(rawValue: typeByte) else { throw .unknownMessageType(typeByte) }
            switch type {
            case .hello: message = .hello(try ConnectionHello(from: &reader))
            case .heartbeat: message = .heartbeat
            case .heartbeatEcho: message = .heartbeatEcho
            case .error: message = .error(try ErrorMessage(from: &reader))
            case .close: message = .close(try Close(from: &reader))
            default: throw .unexpectedMessage(messageType: type.description, state: "connection")
            }
        }
        try reader.expectEnd(messageType: typeByte)
        return message
    }
}
