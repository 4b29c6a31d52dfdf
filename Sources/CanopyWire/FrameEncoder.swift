/// Writes frames: `u32 big-endian length ‖ ciphertext` (§5.2). The secure channel encrypts a
/// plaintext with the frame header as associated data, so it needs the header before the
/// ciphertext exists: `header(ciphertextCount:)` gives it from the length alone.
public enum FrameEncoder {
    /// The 4-byte header of a frame whose ciphertext has `ciphertextCount` bytes. A count outside
    /// the protocol's bounds is a programmer error.
    public static func header(ciphertextCount: Int) -> [UInt8] {
        precondition(
            (WireLimits.frameCiphertextBytesMin...WireLimits.frameCiphertextBytesMax).contains(ciphertextCount),
            "frame ciphertext length outside protocol bounds")
        let length = UInt32(ciphertextCount)
        return [UInt8(length >> 24), UInt8(truncatingIfNeeded: length >> 16),
                UInt8(truncatingIfNeeded: length >> 8), UInt8(truncatingIfNeeded: length)]
    }

    /// The header of the frame that will carry a plaintext of `plaintextCount` bytes.
    public static func header(plaintextCount: Int) -> [UInt8] {
        header(ciphertextCount: plaintextCount + WireLimits.secretstreamOverheadBytes)
    }

    /// Appends a whole frame (header and ciphertext) to `out`.
    public static func encode(ciphertext: some Collection<UInt8>, into out: inout [UInt8]) {
        out.append(contentsOf: header(ciphertextCount: ciphertext.count))
        out.append(contentsOf: ciphertext)
    }
}
