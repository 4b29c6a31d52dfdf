/// The constants that name the handshake and the running transcript hash both sides keep.
///
/// The transcript `T` is chained the way Noise's MixHash is: `T ← BLAKE2b-256(T ‖ data)`, starting
/// from `BLAKE2b-256(protocolName)`. Every signature and every AEAD in the handshake covers the
/// current `T`, so a change to any byte seen so far (version, flags, ephemeral keys, network tags,
/// the responder's sealed identity) makes the handshake fail.
struct HandshakeTranscript {
    /// Names the whole construction; a different construction must use a different name.
    static let protocolName = Array("canopy/1 X25519-Ed25519-XChaCha20Poly1305-BLAKE2b".utf8)
    /// First bytes of Msg1: ASCII "CNPY".
    static let magic: [UInt8] = [0x43, 0x4E, 0x50, 0x59]
    /// The only handshake version this implementation speaks.
    static let version: UInt16 = 1
    /// Prefixed to the transcript hash before the responder signs it.
    static let responderSignatureLabel = Array("canopy/1 responder signature".utf8)
    /// Prefixed to the transcript hash before the initiator signs it. Different from the
    /// responder's, so a signature can never be reflected into the other role.
    static let initiatorSignatureLabel = Array("canopy/1 initiator signature".utf8)
    /// `crypto_kdf` context of the two one-shot handshake keys (ids 2 and 3).
    static let handshakeKeyContext: StaticString = "CNPYhand"
    /// `crypto_kdf` context of the two session keys (id 1: initiator → responder, 2: back).
    static let sessionKeyContext: StaticString = "CNPYsess"

    /// The current transcript hash (32 bytes).
    private(set) var hash: [UInt8]

    init() {
        hash = Sodium.blake2b([HandshakeTranscript.protocolName[...]])
    }

    /// `T ← H(T ‖ parts…)`.
    mutating func mix(_ parts: ArraySlice<UInt8>...) {
        hash = Sodium.blake2b([hash[...]] + parts)
    }
}

/// The optional group secret `N` (`Protocol/replication-v1.md` §4.4, network key). Msg1 and Msg2 carry a MAC under it, so
/// a listener stays silent, spending no DH or signature work, for anyone who lacks it.
/// Nodes that do not configure one share `NetworkKey.open`, a public constant: then the tags
/// only detect corruption and protocol confusion, and authorisation rests on node ids alone.
public struct NetworkKey: Sendable, Equatable {
    /// The 32 key bytes.
    public let bytes: [UInt8]

    /// Bytes of a network key.
    public static let keyBytes = 32

    /// The default key: BLAKE2b-256 of the ASCII text "canopy/1 open network".
    public static let open = NetworkKey(uncheckedBytes: Sodium.blake2b([Array("canopy/1 open network".utf8)[...]]))

    /// Wraps 32 secret bytes; nil for any other length.
    public init?(bytes: [UInt8]) {
        guard bytes.count == NetworkKey.keyBytes else { return nil }
        self.bytes = bytes
    }

    private init(uncheckedBytes: [UInt8]) { bytes = uncheckedBytes }

    /// MAC(N, parts) = keyed BLAKE2b-256.
    func tag(_ parts: ArraySlice<UInt8>...) -> [UInt8] {
        Sodium.blake2b(parts, key: bytes)
    }
}

/// The keys a finished handshake yields (Protocol/replication-v1.md §4.5). Both are derived from
/// the ephemeral DH result and the full transcript, so they are fresh per connection and
/// different per direction; reusing one for both directions would let frames be reflected.
struct SessionKeys {
    /// Key of the initiator → responder secretstream.
    var initiatorToResponder: [UInt8]
    /// Key of the responder → initiator secretstream.
    var responderToInitiator: [UInt8]

    /// `s = MAC(ck, T_final)`, then `crypto_kdf` subkeys 1 and 2 under "CNPYsess".
    init(chainingKey: [UInt8], finalTranscript: [UInt8]) {
        var split = Sodium.blake2b([finalTranscript[...]], key: chainingKey)
        defer { Sodium.wipe(&split) }
        initiatorToResponder = Sodium.deriveKey(from: split, id: 1, context: HandshakeTranscript.sessionKeyContext)
        responderToInitiator = Sodium.deriveKey(from: split, id: 2, context: HandshakeTranscript.sessionKeyContext)
    }
}

/// The chaining key and the two one-shot keys that seal the identities in Msg2 and Msg3.
struct HandshakeKeys {
    var chainingKey: [UInt8]
    var message2Key: [UInt8]
    var message3Key: [UInt8]

    /// `ck = MAC(ee, T2)`; `k2`, `k3` = `crypto_kdf` subkeys 2 and 3 of `ck` under "CNPYhand".
    init(sharedSecret: [UInt8], transcript: [UInt8]) {
        chainingKey = Sodium.blake2b([transcript[...]], key: sharedSecret)
        message2Key = Sodium.deriveKey(from: chainingKey, id: 2, context: HandshakeTranscript.handshakeKeyContext)
        message3Key = Sodium.deriveKey(from: chainingKey, id: 3, context: HandshakeTranscript.handshakeKeyContext)
    }

    mutating func wipe() {
        Sodium.wipe(&chainingKey)
        Sodium.wipe(&message2Key)
        Sodium.wipe(&message3Key)
    }
}
