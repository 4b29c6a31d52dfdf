import CSodium

#if canImport(Crypto)
import Crypto
#endif

/// One handshake's ephemeral X25519 key pair (Protocol/replication-v1.md §4): its public key goes
/// into Msg1 or Msg2, its secret into exactly one Diffie–Hellman with the peer's ephemeral key.
///
/// The one place CanopyCrypto uses a second library, for a measured gain (Tools/canopy-bench/README.md,
/// *Why ephemeral X25519 uses swift-crypto*). On the benchmark machine libsodium 1.0.18 takes ~36 µs to make the public
/// key and ~40 µs for the DH, both with its Montgomery ladder; swift-crypto (BoringSSL) takes
/// ~12 µs (fixed-base Edwards table) and ~31 µs (ADX field arithmetic): about 32 µs less per
/// side and handshake, a quarter of its public-key CPU. X25519 is fully specified by RFC 7748, so
/// both give the same bytes; `X25519KeyTests` checks that against libsodium, and the handshake
/// vectors pin it.
///
/// When swift-crypto is not compiled in (the fuzz build in Tools/fuzz compiles this module alone
/// with swiftc), the same operations run on libsodium; that build holds no real keys, so its copy
/// of the secret is not wiped on release.
public struct EphemeralKey: Sendable {
    #if canImport(Crypto)
    /// BoringSSL keeps the secret in storage it zeroes when released.
    private let key: Curve25519.KeyAgreement.PrivateKey
    #else
    private let secret: [UInt8]
    #endif

    /// The X25519 public key: what `crypto_scalarmult_base` gives for the secret.
    public let publicKey: [UInt8]

    /// The key pair of a 32-byte secret scalar (clamped as RFC 7748 §5 says, as libsodium does).
    /// Wipes `secret`.
    public init(secret: inout [UInt8]) {
        precondition(secret.count == 32, "an X25519 secret is 32 bytes")
        #if canImport(Crypto)
        key = try! Curve25519.KeyAgreement.PrivateKey(rawRepresentation: secret)  // only the size is checked
        publicKey = Array(key.publicKey.rawRepresentation)
        Sodium.wipe(&secret)
        #else
        self.secret = secret
        publicKey = Sodium.x25519Base(secret: secret)
        Sodium.wipe(&secret)
        #endif
    }

    /// A key pair from 32 bytes of `random`.
    public init(random: inout some EntropySource) {
        var secret = random.bytes(32)
        self.init(secret: &secret)
    }

    /// X25519 of our secret and the peer's 32-byte public key; nil when the result is all zero,
    /// which is what every small-order point (and its non-canonical encodings) produces. Callers
    /// MUST treat nil as fatal. BoringSSL, unlike libsodium, does not refuse that result itself,
    /// so the check is here, in constant time.
    public func sharedSecret(with peer: some Collection<UInt8>) -> [UInt8]? {
        precondition(peer.count == 32, "an X25519 public key is 32 bytes")
        #if canImport(Crypto)
        let peerKey = try! Curve25519.KeyAgreement.PublicKey(rawRepresentation: Array(peer))
        let shared = try! key.sharedSecretFromKeyAgreement(with: peerKey)
        var out = shared.withUnsafeBytes { Array($0) }
        guard sodium_is_zero(out, out.count) == 0 else {
            Sodium.wipe(&out)
            return nil
        }
        return out
        #else
        return Sodium.x25519(secret: secret, point: peer)
        #endif
    }
}
