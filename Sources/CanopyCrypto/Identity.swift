import CSodium

/// A node's long-term Ed25519 key pair. Its `nodeID` is the public key.
///
/// The whole identity is derived from a 32-byte seed (`crypto_sign_seed_keypair`), so the seed is
/// all that is stored (see `Identity+File.swift`). The secret key lives in memory from
/// `sodium_malloc` (guard pages, excluded from core dumps, zeroed when freed), as libsodium
/// recommends for long-term keys.
public struct Identity: Sendable {
    /// The public half; also the node id.
    public let nodeID: NodeID
    private let secret: SecretKeyBox

    /// Bytes of the seed an identity is derived from.
    public static let seedBytes = 32
    /// Bytes of an Ed25519 signature.
    public static let signatureBytes = 64

    /// Derives the key pair from a 32-byte seed. Returns nil for any other length.
    public init?(seed: [UInt8]) {
        guard seed.count == Identity.seedBytes else { return nil }
        Sodium.ensureInitialized()
        var publicKey = [UInt8](repeating: 0, count: NodeID.publicKeyBytes)
        let box = SecretKeyBox()
        let status = box.withSecretKey { crypto_sign_seed_keypair(&publicKey, $0, seed) }
        precondition(status == 0, "crypto_sign_seed_keypair failed with valid sizes")
        self.nodeID = NodeID(publicKey: publicKey)!
        self.secret = box
    }

    /// A new identity from `random` (use `SystemEntropy` outside tests).
    public static func generate(random: inout some EntropySource) -> Identity {
        var seed = random.bytes(seedBytes)
        defer { Sodium.wipe(&seed) }
        return Identity(seed: seed)!
    }

    /// The seed, for saving. Handle with care; wipe copies when done.
    public var seed: [UInt8] {
        var seed = [UInt8](repeating: 0, count: Identity.seedBytes)
        secret.withSecretKey { _ = crypto_sign_ed25519_sk_to_seed(&seed, $0) }
        return seed
    }

    /// A detached Ed25519 signature over the concatenation of `parts`.
    func sign(_ parts: [UInt8]...) -> [UInt8] {
        let message = parts.flatMap { $0 }
        var signature = [UInt8](repeating: 0, count: Identity.signatureBytes)
        let status = secret.withSecretKey {
            crypto_sign_detached(&signature, nil, message, UInt64(message.count), $0)
        }
        precondition(status == 0, "crypto_sign_detached failed")
        return signature
    }

    /// Whether `signature` is `signer`'s valid signature over the concatenation of `parts`.
    /// libsodium 1.0.18 also rejects non-canonical and small-order keys and signatures here.
    static func verify(signature: some Collection<UInt8>, by signer: NodeID, over parts: [UInt8]...) -> Bool {
        let message = parts.flatMap { $0 }
        let signatureBytes = Array(signature)
        guard signatureBytes.count == Identity.signatureBytes else { return false }
        return crypto_sign_verify_detached(
            signatureBytes, message, UInt64(message.count), signer.publicKey) == 0
    }
}

/// A 64-byte Ed25519 secret key in `sodium_malloc` memory, freed (and thereby zeroed) with the
/// last reference. Immutable after `init`, so sharing it across threads is safe.
final class SecretKeyBox: @unchecked Sendable {
    private let pointer: UnsafeMutablePointer<UInt8>
    static let bytes = 64

    init() {
        guard let raw = sodium_malloc(SecretKeyBox.bytes) else {
            fatalError("sodium_malloc failed: out of memory for a secret key")
        }
        pointer = raw.bindMemory(to: UInt8.self, capacity: SecretKeyBox.bytes)
        pointer.initialize(repeating: 0, count: SecretKeyBox.bytes)
    }

    deinit { sodium_free(pointer) }

    func withSecretKey<R>(_ body: (UnsafeMutablePointer<UInt8>) -> R) -> R { body(pointer) }
}
