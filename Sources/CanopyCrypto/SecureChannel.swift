import CanopyWire
/// Both directions of an established connection: seals what this node sends, opens what the peer
/// sends (Protocol/replication-v1.md §5).
///
/// The first `seal` output also carries this side's 24-byte stream header, so a caller cannot
/// forget it. Sending `final: true` closes this direction; the peer's FINAL arrives as
/// `ChannelEvent.finished`. Any receive error leaves the whole channel failed: it seals nothing
/// more either, since the connection must close.
public struct SecureChannel: Sendable {
    /// The authenticated peer.
    public let peer: NodeID
    /// The handshake's final transcript hash, identical on both ends.
    public let transcriptHash: [UInt8]
    private var sealing: SealingStream
    private var headerSent = false
    private var reader: ChannelReader

    /// Starts both streams from a finished handshake. The session's leftover bytes (the start of
    /// the peer's stream) are buffered; call `receive([])` to decode them if there were any.
    public init(session: EstablishedSession, random: inout some EntropySource) {
        peer = session.peer
        transcriptHash = session.transcriptHash
        sealing = SealingStream(key: session.sendKey, random: &random)
        reader = ChannelReader(key: session.receiveKey, pending: session.leftover)
    }

    /// Seals one plaintext (at most `WireLimits.framePlaintextBytesMax` bytes) into the bytes
    /// to write: a complete frame, preceded by the stream header the first time.
    public mutating func seal(_ plaintext: [UInt8], final: Bool = false) throws(CryptoError) -> [UInt8] {
        guard !reader.hasFailed else { throw .channelUnusable }
        let output = try sealing.seal(plaintext, final: final, after: headerSent ? [] : sealing.header)
        headerSent = true
        return output
    }

    /// Feeds bytes read from the connection; returns the plaintexts they complete.
    public mutating func receive(_ bytes: some Collection<UInt8>) throws(CryptoError) -> [ChannelEvent] {
        try reader.receive(bytes)
    }

    /// The connection reached EOF; throws unless the peer finished with FINAL.
    public mutating func receiveEnd() throws(CryptoError) {
        try reader.receiveEnd()
    }

    /// Whether the peer has closed its direction gracefully.
    public var peerFinished: Bool { reader.isFinished }
}
