/// The checkpoint messages (§6.8). A checkpoint is an opaque value (the replication engine's
/// record of how far a replication got, with a short session history) that one side stores for
/// the other under a replication id. Values are written only after the data they describe is
/// durable (`Protocol/design.md` §4.2).
///
/// `checkpointGet`: `varint requestID ‖ bytes replicationID` (1...replicationIDBytesMax).
/// `checkpoint` (its reply): `varint requestID ‖ u8 found (0 or 1) ‖ bytes value` — the value
/// (0...checkpointValueBytesMax) only when found is 1.
/// `checkpointSet`: `varint requestID ‖ bytes replicationID ‖ bytes value`.
/// `checkpointSetAck` (its reply, sent once the value is durable): `varint requestID`.
public struct CheckpointGet: WireMessageBody {
    public static let messageType = MessageType.checkpointGet
    public var requestID: RequestID
    public var replicationID: [UInt8]

    public init(requestID: RequestID, replicationID: [UInt8]) {
        self.requestID = requestID
        self.replicationID = replicationID
    }

    public func encode(into writer: inout ByteWriter) {
        writer.writeVarint(requestID)
        writer.writeReplicationID(replicationID)
    }

    public init(from reader: inout ByteReader) throws(ProtocolError) {
        requestID = try reader.readRequestID("checkpointGet.requestID")
        replicationID = try reader.readReplicationID("checkpointGet.replicationID")
    }
}

/// `checkpoint`: the reply to `checkpointGet`; `value` is nil when no checkpoint is stored.
public struct Checkpoint: WireMessageBody {
    public static let messageType = MessageType.checkpoint
    public var requestID: RequestID
    public var value: [UInt8]?

    public init(requestID: RequestID, value: [UInt8]?) {
        self.requestID = requestID
        self.value = value
    }

    public func encode(into writer: inout ByteWriter) {
        writer.writeVarint(requestID)
        if let value {
            writer.writeByte(1)
            writer.writeLengthPrefixed(value, maxBytes: WireLimits.checkpointValueBytesMax)
        } else {
            writer.writeByte(0)
        }
    }

    public init(from reader: inout ByteReader) throws(ProtocolError) {
        requestID = try reader.readRequestID("checkpoint.requestID")
        switch try reader.readByte("checkpoint.found") {
        case 0: value = nil
        case 1: value = try reader.readLengthPrefixed("checkpoint.value", in: 0...WireLimits.checkpointValueBytesMax)
        case let other: throw .invalidValue(field: "checkpoint.found", value: UInt64(other))
        }
    }
}

/// `checkpointSet`: store `value` under `replicationID`, replacing any earlier value.
public struct CheckpointSet: WireMessageBody {
    public static let messageType = MessageType.checkpointSet
    public var requestID: RequestID
    public var replicationID: [UInt8]
    public var value: [UInt8]

    public init(requestID: RequestID, replicationID: [UInt8], value: [UInt8]) {
        self.requestID = requestID
        self.replicationID = replicationID
        self.value = value
    }

    public func encode(into writer: inout ByteWriter) {
        writer.writeVarint(requestID)
        writer.writeReplicationID(replicationID)
        writer.writeLengthPrefixed(value, maxBytes: WireLimits.checkpointValueBytesMax)
    }

    public init(from reader: inout ByteReader) throws(ProtocolError) {
        requestID = try reader.readRequestID("checkpointSet.requestID")
        replicationID = try reader.readReplicationID("checkpointSet.replicationID")
        value = try reader.readLengthPrefixed("checkpointSet.value", in: 0...WireLimits.checkpointValueBytesMax)
    }
}

/// `checkpointSetAck`: the value of the `checkpointSet` with this request id is durable.
public struct CheckpointSetAck: WireMessageBody {
    public static let messageType = MessageType.checkpointSetAck
    public var requestID: RequestID

    public init(requestID: RequestID) {
        self.requestID = requestID
    }

    public func encode(into writer: inout ByteWriter) {
        writer.writeVarint(requestID)
    }

    public init(from reader: inout ByteReader) throws(ProtocolError) {
        requestID = try reader.readRequestID("checkpointSetAck.requestID")
    }
}

extension ByteWriter {
    /// Writes a replication id (1...replicationIDBytesMax bytes).
    mutating func writeReplicationID(_ id: [UInt8]) {
        precondition(!id.isEmpty, "empty replication id")
        writeLengthPrefixed(id, maxBytes: WireLimits.replicationIDBytesMax)
    }
}

extension ByteReader {
    /// Reads a replication id, refusing an empty or over-long one.
    mutating func readReplicationID(_ field: String) throws(ProtocolError) -> [UInt8] {
        try readLengthPrefixed(field, in: 1...WireLimits.replicationIDBytesMax)
    }
}
