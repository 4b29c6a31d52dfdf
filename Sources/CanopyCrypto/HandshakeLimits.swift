import CanopyWire

/// CanopyCrypto's view of the limits in `WireLimits` (the one file that holds every limit,
/// `Protocol/design.md` §9.4), plus what libsodium fixes. Named here so the handshake code reads short.
enum HandshakeLimits {
    static let message1Bytes = WireLimits.handshakeMessage1Bytes
    static let message2Bytes = WireLimits.handshakeMessage2Bytes
    static let message3Bytes = WireLimits.handshakeMessage3Bytes
}
