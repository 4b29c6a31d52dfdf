import CSodium
import Testing
@testable import CanopyCrypto

/// `EphemeralKey` (swift-crypto's X25519) against libsodium's, which stays the reference: a
/// single differing byte would change the handshake on the wire.
@Suite("X25519 ephemeral keys")
struct X25519KeyTests {
    /// libsodium's public key of `secret` (`crypto_scalarmult_base`, the Montgomery ladder).
    static func libsodiumPublicKey(_ secret: [UInt8]) -> [UInt8] {
        Sodium.ensureInitialized()
        var out = [UInt8](repeating: 0, count: 32)
        #expect(crypto_scalarmult_base(&out, secret) == 0)
        return out
    }

    /// libsodium's X25519 of `secret` and `point`; nil where `crypto_scalarmult` refuses.
    static func libsodiumShared(_ secret: [UInt8], _ point: [UInt8]) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: 32)
        return crypto_scalarmult(&out, secret, point) == 0 ? out : nil
    }

    static func publicKey(_ secret: [UInt8]) -> [UInt8] {
        var copy = secret
        return EphemeralKey(secret: &copy).publicKey
    }

    @Test("the public key equals crypto_scalarmult_base's for 5,000 seeded random secrets")
    func randomSecrets() {
        var random = DeterministicEntropy(seed: [UInt8](repeating: 7, count: 32))
        var mismatches = 0
        for _ in 0..<5_000 {
            let secret = random.bytes(32)
            if Self.publicKey(secret) != Self.libsodiumPublicKey(secret) { mismatches += 1 }
        }
        #expect(mismatches == 0)
    }

    /// All zero, all ones, the bits clamping clears or sets, the smallest and largest clamped
    /// scalars, and every single bit on its own.
    static let edgeSecrets: [[UInt8]] = {
        let zero = [UInt8](repeating: 0, count: 32)
        var secrets = [zero, [UInt8](repeating: 0xFF, count: 32)]
        for (index, value) in [(0, 0x07), (0, 0x01), (0, 0x08), (31, 0x80), (31, 0x40), (31, 0xC0), (31, 0x3F)] {
            var secret = zero
            secret[index] = UInt8(value)
            secrets.append(secret)
        }
        var largest = [UInt8](repeating: 0xFF, count: 32)
        largest[0] = 0xF8
        largest[31] = 0x7F
        secrets.append(largest)
        for bit in 0..<256 {
            var secret = zero
            secret[bit / 8] = 1 << UInt8(bit % 8)
            secrets.append(secret)
        }
        return secrets
    }()

    @Test("the public key equals crypto_scalarmult_base's for edge scalars", arguments: X25519KeyTests.edgeSecrets)
    func edgeScalars(secret: [UInt8]) {
        #expect(Self.publicKey(secret) == Self.libsodiumPublicKey(secret))
    }

    @Test("secrets that differ only in clamped bits give the same public key")
    func clampedBitsIgnored() {
        var random = DeterministicEntropy(seed: [UInt8](repeating: 9, count: 32))
        for _ in 0..<100 {
            var secret = random.bytes(32)
            let key = Self.publicKey(secret)
            secret[0] ^= 0x07
            secret[31] ^= 0x80
            secret[31] |= 0x40
            #expect(Self.publicKey(secret) == key)
        }
    }

    @Test("the secret handed in is wiped")
    func secretWiped() {
        var secret = [UInt8](repeating: 0xA5, count: 32)
        _ = EphemeralKey(secret: &secret)
        #expect(secret == [UInt8](repeating: 0, count: 32))
    }

    @Test("both sides get libsodium's shared secret, for keys and for arbitrary 32-byte points")
    func sharedSecretAgrees() throws {
        var random = DeterministicEntropy(seed: [UInt8](repeating: 3, count: 32))
        for _ in 0..<300 {
            let (a, b) = (random.bytes(32), random.bytes(32))
            var (secretA, secretB) = (a, b)
            let (keyA, keyB) = (EphemeralKey(secret: &secretA), EphemeralKey(secret: &secretB))
            let ab = try #require(keyA.sharedSecret(with: keyB.publicKey))
            #expect(ab == keyB.sharedSecret(with: keyA.publicKey))
            #expect(ab == Self.libsodiumShared(a, Self.libsodiumPublicKey(b)))
            // Any 32 bytes (top bit set, u ≥ p, off-curve twist points) are treated alike.
            let point = random.bytes(32)
            #expect(keyA.sharedSecret(with: point) == Self.libsodiumShared(a, point))
        }
    }

    /// libsodium's list of small-order u-coordinates (0, 1, two of order 8, p − 1, p, p + 1),
    /// each also with bit 255 set, which X25519 ignores.
    static let smallOrderEncodings: [[UInt8]] = {
        let base = [
            [UInt8](repeating: 0, count: 32),
            [1] + [UInt8](repeating: 0, count: 31),
            hexBytes("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"),
            hexBytes("5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157"),
            hexBytes("ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
            hexBytes("edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
            hexBytes("eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
        ]
        return base + base.map { point in
            var high = point
            high[31] |= 0x80
            return high
        }
    }()

    @Test("every small-order encoding is refused, as libsodium refuses it", arguments: X25519KeyTests.smallOrderEncodings)
    func smallOrderRefused(point: [UInt8]) {
        var random = DeterministicEntropy(seed: [UInt8](repeating: 11, count: 32))
        for _ in 0..<20 {
            let secret = random.bytes(32)
            var copy = secret
            #expect(EphemeralKey(secret: &copy).sharedSecret(with: point) == nil)
            #expect(Self.libsodiumShared(secret, point) == nil)
        }
    }
}
