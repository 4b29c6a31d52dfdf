import CanopyWire
/// The dialling side of the handshake (Protocol/replication-v1.md §4), as a state machine with no
/// I/O: the caller feeds it bytes, the end of the stream and clock readings, and carries out the
/// returned actions.
///
///     start() ──send Msg1──▶ awaitingMessage2 ──Msg2 ok──▶ send Msg3, established
///                                   │
///                                   └── bad Msg2 / EOF / deadline ──▶ failed (close, send nothing)
///
/// Randomness (the ephemeral key) comes from the injected `EntropySource`, time from the `now`
/// arguments, so a transcript is reproducible from fixed inputs.
public struct HandshakeInitiator: Sendable {
    private enum State {
        case awaitingMessage2(transcript: HandshakeTranscript, ephemeral: EphemeralKey)
        case established
        case failed(CryptoError)
    }

    private let configuration: HandshakeConfiguration
    private let deadline: Duration
    private let message1: [UInt8]
    private var state: State
    private var buffer: [UInt8] = []

    /// Prepares Msg1 with a fresh ephemeral key. `now` is the caller's clock when the TCP
    /// connection was established; the handshake fails at `now + handshakeTimeoutSeconds`.
    public init(configuration: HandshakeConfiguration, now: Duration, random: inout some EntropySource) {
        self.configuration = configuration
        self.deadline = now + .seconds(WireLimits.handshakeTimeoutSeconds)
        let ephemeral = EphemeralKey(random: &random)
        var header = HandshakeTranscript.magic
        header += [UInt8(HandshakeTranscript.version >> 8), UInt8(HandshakeTranscript.version & 0xFF)]
        header += [UInt8(configuration.flags >> 8), UInt8(configuration.flags & 0xFF)]
        header += ephemeral.publicKey
        let message1 = header + configuration.networkKey.tag(header[...])
        var transcript = HandshakeTranscript()
        transcript.mix(message1[...])
        self.message1 = message1
        self.state = .awaitingMessage2(transcript: transcript, ephemeral: ephemeral)
    }

    /// The first action: send Msg1.
    public func start() -> [HandshakeAction] {
        [.send(message1)]
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
        case .awaitingMessage2(let transcript, let ephemeral):
            if now >= deadline { return fail(.handshakeTimedOut) }
            buffer.append(contentsOf: bytes)
            // Msg2 needs a reply before the responder may say more; extra bytes are a violation.
            if buffer.count > HandshakeLimits.message2Bytes { return fail(.handshakeUnexpectedBytes) }
            guard buffer.count == HandshakeLimits.message2Bytes else { return [] }
            return process(message2: buffer, transcript: transcript, ephemeral: ephemeral, now: now)
        }
    }

    /// The connection ended (EOF or reset) before the handshake finished.
    public mutating func receiveEnd() -> [HandshakeAction] {
        switch state {
        case .failed(let error): return [.fail(error)]
        case .established: return []
        case .awaitingMessage2: return fail(.handshakeTruncated)
        }
    }

    /// A clock reading with no new bytes: fails the handshake once the deadline has passed.
    public mutating func tick(now: Duration) -> [HandshakeAction] {
        guard case .awaitingMessage2 = state, now >= deadline else { return [] }
        return fail(.handshakeTimedOut)
    }

    private mutating func fail(_ error: CryptoError) -> [HandshakeAction] {
        // Dropping the state releases the ephemeral key, whose storage wipes itself.
        state = .failed(error)
        buffer = []
        return [.fail(error)]
    }

    /// Msg2 = eR(32) ‖ tag2(32) ‖ C2(112). Checks in order: network tag, DH, AEAD, signature,
    /// authorisation; only then answers with Msg3.
    private mutating func process(
        message2: [UInt8], transcript start: HandshakeTranscript, ephemeral: EphemeralKey, now: Duration
    ) -> [HandshakeAction] {
        var transcript = start
        let responderEphemeral = message2[0..<32]
        let tag = message2[32..<64]
        let sealed = message2[64...]
        guard Sodium.equal32(tag, configuration.networkKey.tag(transcript.hash[...], responderEphemeral)) else {
            return fail(.handshakeNetworkMismatch)
        }
        guard var shared = ephemeral.sharedSecret(with: responderEphemeral) else {
            return fail(.handshakeSmallOrderKey)
        }
        transcript.mix(responderEphemeral, tag)
        var keys = HandshakeKeys(sharedSecret: shared, transcript: transcript.hash)
        Sodium.wipe(&shared)
        defer { keys.wipe() }
        guard let opened = Sodium.openOnce(key: keys.message2Key, additionalData: transcript.hash, ciphertext: sealed)
        else { return fail(.handshakeDecryptionFailed) }
        let responder = NodeID(publicKey: opened[0..<32])!
        guard Identity.verify(
            signature: opened[32..<96], by: responder,
            over: HandshakeTranscript.responderSignatureLabel, transcript.hash)
        else { return fail(.handshakeBadSignature) }
        transcript.mix(sealed)
        if let refusal = configuration.authorize(responder, now: now) { return fail(refusal) }

        let signature = configuration.identity.sign(HandshakeTranscript.initiatorSignatureLabel, transcript.hash)
        let message3 = Sodium.sealOnce(
            key: keys.message3Key, additionalData: transcript.hash,
            plaintext: configuration.identity.nodeID.publicKey + signature)
        transcript.mix(message3[...])
        let session = SessionKeys(chainingKey: keys.chainingKey, finalTranscript: transcript.hash)
        state = .established
        buffer = []
        return [
            .send(message3),
            .established(EstablishedSession(
                role: .initiator, peer: responder, transcriptHash: transcript.hash, leftover: [],
                sendKey: session.initiatorToResponder, receiveKey: session.responderToInitiator)),
        ]
    }
}
