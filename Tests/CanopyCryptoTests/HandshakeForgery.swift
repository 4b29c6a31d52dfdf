@testable import CanopyCrypto

/// Builds handshake messages the way an attacker holding some of the keys could: the same steps
/// as the real state machines, but with the signed bytes chosen by the test.
enum HandshakeForgery {
    /// Msg2 answering `message1` from `identity`, signing whatever `sign` returns over `T2`.
    static func message2(
        answering message1: [UInt8], as identity: Identity, ephemeralSecret: [UInt8],
        ephemeral: [UInt8]? = nil, sign: (Identity, [UInt8]) -> [UInt8]
    ) -> [UInt8] {
        var transcript = HandshakeTranscript()
        transcript.mix(message1[...])
        let publicEphemeral = ephemeral ?? Sodium.x25519Base(secret: ephemeralSecret)
        let tag = NetworkKey.open.tag(transcript.hash[...], publicEphemeral[...])
        guard let shared = Sodium.x25519(secret: ephemeralSecret, point: message1[8..<40]) else {
            return publicEphemeral + tag + [UInt8](repeating: 0, count: 112)
        }
        transcript.mix(publicEphemeral[...], tag[...])
        let keys = HandshakeKeys(sharedSecret: shared, transcript: transcript.hash)
        let sealed = Sodium.sealOnce(
            key: keys.message2Key, additionalData: transcript.hash,
            plaintext: identity.nodeID.publicKey + sign(identity, transcript.hash))
        return publicEphemeral + tag + sealed
    }

    /// Msg3 for a run whose initiator ephemeral secret is known, signing what `sign` returns.
    static func message3(
        message1: [UInt8], message2: [UInt8], initiatorEphemeralSecret: [UInt8], as identity: Identity,
        sign: (Identity, [UInt8]) -> [UInt8]
    ) -> [UInt8] {
        var transcript = HandshakeTranscript()
        transcript.mix(message1[...])
        let shared = Sodium.x25519(secret: initiatorEphemeralSecret, point: message2[0..<32])!
        transcript.mix(message2[0..<32], message2[32..<64])
        let keys = HandshakeKeys(sharedSecret: shared, transcript: transcript.hash)
        transcript.mix(message2[64...])
        return Sodium.sealOnce(
            key: keys.message3Key, additionalData: transcript.hash,
            plaintext: identity.nodeID.publicKey + sign(identity, transcript.hash))
    }

    /// A Msg1 with the given ephemeral key and a valid open-network tag.
    static func message1(ephemeral: [UInt8], version: UInt16 = 1) -> [UInt8] {
        let header = HandshakeTranscript.magic + [UInt8(version >> 8), UInt8(version & 0xFF), 0, 0] + ephemeral
        return header + NetworkKey.open.tag(header[...])
    }

    /// The first ephemeral secret a `DeterministicEntropy` seeded with `byte` yields.
    static func firstEphemeralSecret(entropy byte: UInt8) -> [UInt8] {
        var random = Fixture.entropy(byte)
        return random.bytes(32)
    }

    /// X25519 u-coordinates of small order (little-endian): 0, 1, a point of order 8, and p − 1.
    static let smallOrderPoints: [[UInt8]] = [
        [UInt8](repeating: 0, count: 32),
        [1] + [UInt8](repeating: 0, count: 31),
        hexBytes("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"),
        hexBytes("ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
    ]
}
