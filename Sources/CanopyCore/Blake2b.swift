import CSodium

/// BLAKE2b hashing (libsodium's `crypto_generichash`): computation only, no I/O.
public enum Blake2b {
    /// The unkeyed BLAKE2b digest of `input`, `outputBytes` long (16...64).
    public static func hash(_ input: [UInt8], outputBytes: Int = 32) -> [UInt8] {
        precondition((16...64).contains(outputBytes), "BLAKE2b output must be 16...64 bytes")
        var digest = [UInt8](repeating: 0, count: outputBytes)
        let status = crypto_generichash(&digest, outputBytes, input, UInt64(input.count), nil, 0)
        precondition(status == 0, "crypto_generichash failed with valid sizes")
        return digest
    }
}
