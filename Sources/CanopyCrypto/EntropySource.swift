import CSodium

/// Where CanopyCrypto gets randomness: identity seeds, ephemeral keys and stream headers.
///
/// Injected (`Protocol/design.md` §9.2) so that a simulation or a test vector can make every handshake byte
/// reproducible. Production code uses `SystemEntropy`.
public protocol EntropySource {
    /// Returns `count` fresh bytes.
    mutating func bytes(_ count: Int) -> [UInt8]
}

/// The operating system's CSPRNG through libsodium (`randombytes_buf`, `getrandom` on Linux).
public struct SystemEntropy: EntropySource, Sendable {
    public init() { Sodium.ensureInitialized() }

    public mutating func bytes(_ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, $0.count) }
        return out
    }
}

/// A reproducible stream of bytes from a 32-byte seed, for tests, vectors and the simulator.
/// NEVER use it for real keys.
///
/// Each call expands the current seed with `randombytes_buf_deterministic` (ChaCha20) into
/// 32 + `count` bytes: the first 32 replace the seed, the rest are returned. So the output of a
/// call depends only on the seed and the sizes of the calls before it, and is pinned by
/// `Protocol/vectors/handshake.json`.
public struct DeterministicEntropy: EntropySource, Sendable {
    private var seed: [UInt8]

    /// Bytes of the seed.
    public static let seedBytes = 32

    /// Creates the stream. `seed` must be `seedBytes` long.
    public init(seed: [UInt8]) {
        precondition(seed.count == DeterministicEntropy.seedBytes, "seed must be 32 bytes")
        Sodium.ensureInitialized()
        self.seed = seed
    }

    public mutating func bytes(_ count: Int) -> [UInt8] {
        var expanded = [UInt8](repeating: 0, count: DeterministicEntropy.seedBytes + count)
        expanded.withUnsafeMutableBytes { out in
            randombytes_buf_deterministic(out.baseAddress!, out.count, seed)
        }
        seed = Array(expanded[0..<DeterministicEntropy.seedBytes])
        return Array(expanded[DeterministicEntropy.seedBytes...])
    }
}
