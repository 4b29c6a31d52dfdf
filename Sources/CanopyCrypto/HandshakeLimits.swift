/// Every size and time limit of the handshake and the secure channel, in one place
/// (STYLE.md §6). Protocol/replication-v1.md §4–§5 state the same values; `SpecConstantsTests`
/// reads the spec and compares.
///
/// These live in CanopyCrypto until the wire module's `WireLimits` can take them.
public enum HandshakeLimits {
    /// The handshake must complete within this many seconds of the TCP connection being
    /// established, measured on the caller's clock. Syncthing allows 20 s for its hello; 10 s is
    /// ample for three small messages even on a slow link.
    public static let handshakeTimeoutSeconds = 10

    /// Msg1: magic 4 ‖ version 2 ‖ flags 2 ‖ ephemeral key 32 ‖ network tag 32.
    public static let message1Bytes = 72
    /// Msg2: ephemeral key 32 ‖ network tag 32 ‖ sealed (public key 32 ‖ signature 64) + MAC 16.
    public static let message2Bytes = 176
    /// Msg3: sealed (public key 32 ‖ signature 64) + MAC 16.
    public static let message3Bytes = 112
}

/// Limits of the secure channel (Protocol/replication-v1.md §5).
public enum ChannelLimits {
    /// Bytes of the big-endian length prefix in front of every frame.
    public static let lengthPrefixBytes = 4
    /// The secretstream header each side sends once, before its first frame.
    public static let streamHeaderBytes = 24
    /// What secretstream adds to every plaintext: 1 encrypted tag byte and a 16-byte MAC.
    public static let frameOverheadBytes = 17
    /// Largest plaintext in one frame (1 MiB). Larger messages are split by the layer above.
    public static let framePlaintextBytesMax = 1 << 20
    /// Smallest valid length prefix: an empty plaintext.
    public static let frameCiphertextBytesMin = frameOverheadBytes
    /// Largest valid length prefix, checked before anything is allocated for the frame.
    public static let frameCiphertextBytesMax = framePlaintextBytesMax + frameOverheadBytes
}
