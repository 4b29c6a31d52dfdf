import CanopyWire
/// The accepting side of the handshake (Protocol/replication-v1.md §4), as a state machine with
/// no I/O.
///
///     awaitingMessage1 ──Msg1 ok──▶ send Msg2 ──▶ awaitingMessage3 ──Msg3 ok──▶ established
///            │                                          │
///            └──────── bad input / EOF / deadline ──────┴──▶ failed (close, send nothing)
///
/// Before Msg3 authenticates the initiator, the responder never sends an error: a scanner or a
/// peer outside the network learns nothing but a closed connection.
public struct HandshakeResponder: Sendable {
    private enum State {
        case awaitingMessage1(ephemeral: EphemeralKey)
        case awaitingMessage3(transcript: HandshakeTranscript, keys: HandshakeKeys)
        case established
        case failed(CryptoError)
    }

    private let configuration: HandshakeConfiguration
    private let deadline: Duration
    private var state: State
    private var buffer: [UInt8] = []

    /// `now` is the caller's clock when the connection was accepted; the handshake fails at
    /// `now + handshakeTimeoutSeconds`. `random` supplies the ephemeral key, drawn here so the
    /// randomness is consumed in the same order whatever the peer sends.
    public init(configuration: HandshakeConfiguration, now: Duration, random: inout some EntropySource) {
        self.configuration = configuration
        self.deadline = now + .seconds(WireLimits.handshakeTimeoutSeconds)
        self.state = .awaitingMessage1(ephemeral: EphemeralKey(random: &random))
    }

    /// Whether the handshake has failed, and why.
    public var failure: CryptoError? {
        if case .failed(let error) = state { return error }
        return nil
    }

    /// Feeds bytes read from the connection.
    public mutating func receive(_ bytes: some Collection<UInt8>, now: Duration) -> [HandshakeAction] {
        switch state {
        case .failed(let error):
            return [.fail(error)]
        case .established:
            preconditionFailure("bytes after the handshake belong to the SecureChannel")
        case .awaitingMessage1(let ephemeral):
            if now >= deadline { return fail(.handshakeTimedOut) }
            buffer.append(contentsOf: bytes)
            // The initiator cannot know Msg3 before it has our Msg2: more bytes are a violation.
            if buffer.count > HandshakeLimits.message1Bytes { return fail(.handshakeUnexpectedBytes) }
            guard buffer.count == HandshakeLimits.message1Bytes else { return [] }
            return process(message1: buffer, ephemeral: ephemeral)
        case .awaitingMessage3(let transcript, let keys):
            if now >= deadline { return fail(.handshakeTimedOut) }
            // Bytes past Msg3 are the initiator's stream header and frames: keep them for later.
            buffer.append(contentsOf: bytes)
            guard buffer.count >= HandshakeLimits.message3Bytes else { return [] }
            return process(transcript: transcript, keys: keys, now: now)
        }
    }

    /// The connection ended (EOF or reset) before the handshake finished.
    public mutating func receiveEnd() -> [HandshakeAction] {
        switch state {
        case .failed(let error): return [.fail(error)]
        case .established: return []
        case .awaitingMessage1, .awaitingMessage3: return fail(.handshakeTruncated)
        }
    }

    /// A clock reading with no new bytes: fails the handshake once the deadline has passed.
    public mutating func tick(now: Duration) -> [HandshakeAction] {
        switch state {
        case .awaitingMessage1, .awaitingMessage3:
            return now >= deadline ? fail(.handshakeTimedOut) : []
        case .established, .failed:
            return []
        }
    }

    private mutating func fail(_ error: CryptoError) -> [HandshakeAction] {
        // Rebind the keys, drop the state's reference, then wipe the now-unique copy; an
        // ephemeral key wipes its own storage when the state releases it.
        switch state {
        case .awaitingMessage3(_, var keys):
            state = .failed(error)
            keys.wipe()
        case .awaitingMessage1, .established, .failed:
            state = .failed(error)
        }
        buffer = []
        return [.fail(error)]
    }

    /// Msg1 = magic(4) ‖ version(2) ‖ flags(2) ‖ eI(32) ‖ tag1(32). Checks in order: magic,
    /// version, network tag, DH; then answers with Msg2.
    private mutating func process(message1: [UInt8], ephemeral: EphemeralKey) -> [HandshakeAction] {
        guard Array(message1[0..<4]) == HandshakeTranscript.magic else { return fail(.handshakeMalformed) }
        let version = UInt16(message1[4]) << 8 | UInt16(message1[5])
        guard version == HandshakeTranscript.version else { return fail(.handshakeVersionUnsupported(version)) }
        guard Sodium.equal32(message1[40..<72], configuration.networkKey.tag(message1[0..<40])) else {
            return fail(.handshakeNetworkMismatch)
        }
        let initiatorEphemeral = message1[8..<40]
        var transcript = HandshakeTranscript()
        transcript.mix(message1[...])

        guard var shared = ephemeral.sharedSecret(with: initiatorEphemeral) else {
            return fail(.handshakeSmallOrderKey)
        }
        let tag = configuration.networkKey.tag(transcript.hash[...], ephemeral.publicKey[...])
        transcript.mix(ephemeral.publicKey[...], tag[...])
        let keys = HandshakeKeys(sharedSecret: shared, transcript: transcript.hash)
        Sodium.wipe(&shared)
        let signature = configuration.identity.sign(HandshakeTranscript.responderSignatureLabel, transcript.hash)
        let sealed = Sodium.sealOnce(
            key: keys.message2Key, additionalData: transcript.hash,
            plaintext: configuration.identity.nodeID.publicKey + signature)
        transcript.mix(sealed[...])
        state = .awaitingMessage3(transcript: transcript, keys: keys)  // drops the ephemeral secret
        buffer = []
        return [.send(ephemeral.publicKey + tag + sealed)]
    }

    /// Msg3 = C3(112). Checks in order: AEAD, signature, authorisation.
    private mutating func process(transcript start: HandshakeTranscript, keys: HandshakeKeys, now: Duration)
        -> [HandshakeAction]
    {
        var transcript = start
        let sealed = buffer[0..<HandshakeLimits.message3Bytes]
        guard let opened = Sodium.openOnce(key: keys.message3Key, additionalData: transcript.hash, ciphertext: sealed)
        else { return fail(.handshakeDecryptionFailed) }
        let initiator = NodeID(publicKey: opened[0..<32])!
        guard Identity.verify(
            signature: opened[32..<96], by: initiator,
            over: HandshakeTranscript.initiatorSignatureLabel, transcript.hash)
        else { return fail(.handshakeBadSignature) }
        transcript.mix(sealed)
        if let refusal = configuration.authorize(initiator, now: now) { return fail(refusal) }

        let session = SessionKeys(chainingKey: keys.chainingKey, finalTranscript: transcript.hash)
        let leftover = Array(buffer[HandshakeLimits.message3Bytes...])
        state = .established
        buffer = []
        return [
            .established(EstablishedSession(
                role: .responder, peer: initiator, transcriptHash: transcript.hash, leftover: leftover,
                sendKey: session.responderToInitiator, receiveKey: session.initiatorToResponder)),
        ]
    }
}
