/// `hello` (§6.1): the first message each side sends after the handshake, and only then. It says
/// which protocol version and features the sender speaks, which database it serves, how much
/// history it keeps and how many `changes` requests it will accept in flight.
///
/// | field | type | meaning |
/// | --- | --- | --- |
/// | version | varint | highest protocol version the sender speaks (≥ 1) |
/// | features | varint | feature bits; unknown bits are ignored; bit 0 `subscribes`: the sender will subscribe to the receiver's changes (so the receiver can tell when a sync is complete in both directions); bit 1 `importedIDs`: the sender accepts revisions marked as having imported ids; bit 2 `refusals`: the sender accepts `revisionsAck` naming refused documents |
/// | databaseID | 16 bytes | the sender's database id |
/// | revsLimit | varint | 1...revsLimitMax: ancestry the sender keeps per leaf (informative: histories up to revsLimitMax are accepted) |
/// | window | varint | 1...inFlightBatchesMax: `changes` requests the sender accepts in flight |
public struct Hello: WireMessageBody {
    public static let messageType = MessageType.hello
    /// Feature bit: the sender will subscribe to the receiver's changes on this connection.
    public static let subscribesFeature: UInt64 = 1 << 0
    /// Feature bit: the sender accepts revisions marked `importedID` in `revisions` (§6.6). A
    /// side marks imported ids only towards a peer that set it.
    public static let importedIDsFeature: UInt64 = 1 << 1
    /// Feature bit: the sender accepts `revisionsAck` with status 2 (documents refused), so a
    /// node learns which of the documents it pushed the peer refused.
    public static let refusalsFeature: UInt64 = 1 << 2
    /// Feature bit: the sender answers `attachmentGet` and may send it (§6.12); attachment
    /// messages are exchanged only when both sides set it.
    public static let attachmentsFeature: UInt64 = 1 << 3
    /// Feature bit: the sender settles the conflicts its pull creates with a resolver of its own,
    /// so it serves the receiver's subscription only once its own pull has caught up (§6.2): its
    /// resolver decides the conflicts of a reconnection, not the receiver's policy. When both
    /// sides set it, only the one with the lower `databaseID` (byte-wise) waits.
    public static let pullsFirstFeature: UInt64 = 1 << 4
    /// Feature bit: the sender answers `digestGet` and may send it (§6.13); digest messages are
    /// exchanged only when both sides set it.
    public static let digestsFeature: UInt64 = 1 << 5
    /// Bytes of a database id.
    public static let databaseIDBytes = 16

    public var version: UInt64
    public var features: UInt64
    /// Exactly `databaseIDBytes` bytes.
    public var databaseID: [UInt8]
    public var revsLimit: Int
    public var window: Int

    public init(version: UInt64 = WireLimits.protocolVersion, features: UInt64 = 0, databaseID: [UInt8],
                revsLimit: Int, window: Int) {
        precondition(databaseID.count == Hello.databaseIDBytes, "database id must be 16 bytes")
        precondition((1...WireLimits.revsLimitMax).contains(revsLimit), "revsLimit out of range")
        precondition((1...WireLimits.inFlightBatchesMax).contains(window), "window out of range")
        self.version = version
        self.features = features
        self.databaseID = databaseID
        self.revsLimit = revsLimit
        self.window = window
    }

    public func encode(into writer: inout ByteWriter) {
        writer.writeVarint(version)
        writer.writeVarint(features)
        writer.writeRaw(databaseID)
        writer.writeVarint(UInt64(revsLimit))
        writer.writeVarint(UInt64(window))
    }

    public init(from reader: inout ByteReader) throws(ProtocolError) {
        version = try reader.readVarint("hello.version")
        guard version >= 1 else { throw .unsupportedVersion(offered: version) }
        features = try reader.readVarint("hello.features")
        databaseID = Array(try reader.readRaw(Hello.databaseIDBytes, "hello.databaseID"))
        revsLimit = try reader.readVarint("hello.revsLimit", in: 1...WireLimits.revsLimitMax)
        window = try reader.readVarint("hello.window", in: 1...WireLimits.inFlightBatchesMax)
    }
}
