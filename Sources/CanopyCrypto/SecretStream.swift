import CSodium
import CanopyWire

/// The two halves of one direction of the secure channel: a `crypto_secretstream_xchacha20poly1305`
/// stream whose messages are framed as (Protocol/replication-v1.md §5)
///
///     frame = length(u32, big-endian) ‖ ciphertext(length)      length = plaintext + 17
///
/// with the 4 length bytes passed to secretstream as additional data, so a changed length fails
/// authentication even though it travels in clear. Each stream has its own key (the handshake
/// derives one per direction) and its own random 24-byte header, sent once before the first frame.
enum SecretStreamTag {
    /// An ordinary frame.
    static let message = UInt8(crypto_secretstream_xchacha20poly1305_tag_message())
    /// The last frame of the stream: a graceful close.
    static let final = UInt8(crypto_secretstream_xchacha20poly1305_tag_final())
}

/// The sending half. Fails closed: after a FINAL frame it refuses to seal more.
public struct SealingStream: Sendable {
    private var state = crypto_secretstream_xchacha20poly1305_state()
    private var finished = false
    /// The 24-byte header the receiver needs; send it before the first frame.
    public let header: [UInt8]

    /// Starts a stream under `key` (32 bytes) with a header drawn from `random`.
    ///
    /// libsodium's `init_push` draws the header from the system RNG, which would make test vectors
    /// irreproducible. `init_push` and `init_pull` compute the identical state from (key, header)
    /// (HChaCha20 subkey, counter 1, nonce from header bytes 16–23), so the state is built with
    /// `init_pull` from an injected header; `SecretStreamTests` pins the equivalence.
    public init(key: [UInt8], random: inout some EntropySource) {
        precondition(key.count == 32, "secretstream keys are 32 bytes")
        Sodium.ensureInitialized()
        header = random.bytes(WireLimits.secretstreamHeaderBytes)
        let status = crypto_secretstream_xchacha20poly1305_init_pull(&state, header, key)
        precondition(status == 0, "secretstream init failed with valid sizes")
    }

    /// Seals `plaintext` as one complete frame (length prefix included), placed after `leading`
    /// bytes (e.g. the stream header) in a single allocation.
    public mutating func seal(_ plaintext: [UInt8], final: Bool = false, after leading: [UInt8] = [])
        throws(CryptoError) -> [UInt8]
    {
        guard !finished else { throw .channelUnusable }
        guard plaintext.count <= WireLimits.framePlaintextBytesMax else {
            throw .plaintextTooLarge(plaintext.count)
        }
        let prefix = FrameEncoder.header(plaintextCount: plaintext.count)
        let frameStart = leading.count + prefix.count
        let total = frameStart + plaintext.count + WireLimits.secretstreamOverheadBytes
        let tag = final ? SecretStreamTag.final : SecretStreamTag.message
        var status: Int32 = -1
        let output = [UInt8](unsafeUninitializedCapacity: total) { out, initialized in
            let base = out.baseAddress!
            if !leading.isEmpty {
                leading.withUnsafeBufferPointer { base.update(from: $0.baseAddress!, count: $0.count) }
            }
            prefix.withUnsafeBufferPointer { (base + leading.count).update(from: $0.baseAddress!, count: $0.count) }
            status = plaintext.withUnsafeBufferPointer { message in
                crypto_secretstream_xchacha20poly1305_push(
                    &state, base + frameStart, nil, message.baseAddress, UInt64(message.count),
                    base + leading.count, UInt64(prefix.count), tag)
            }
            initialized = total
        }
        precondition(status == 0, "secretstream push failed with a bounded message")
        if final { finished = true }
        return output
    }
}

/// One authenticated plaintext and whether it ended the stream.
public struct OpenedFrame: Sendable, Equatable {
    public let plaintext: [UInt8]
    public let isFinal: Bool
}

/// The receiving half. The first failure poisons it: secretstream does not advance on a failed
/// pull, so carrying on would let an attacker probe; the connection must close instead.
public struct OpeningStream: Sendable {
    private var state = crypto_secretstream_xchacha20poly1305_state()
    private var usable = true

    /// Starts the peer's stream from its 24-byte `header` and the direction's `key`.
    public init(key: [UInt8], header: some Collection<UInt8>) throws(CryptoError) {
        precondition(key.count == 32, "secretstream keys are 32 bytes")
        Sodium.ensureInitialized()
        let headerBytes = Array(header)
        guard headerBytes.count == WireLimits.secretstreamHeaderBytes,
            crypto_secretstream_xchacha20poly1305_init_pull(&state, headerBytes, key) == 0
        else { throw .channelDecryptionFailed }
    }

    /// Authenticates and decrypts one frame's ciphertext. `lengthPrefix` is the frame's 4 length
    /// bytes as received; they are authenticated too.
    public mutating func open(lengthPrefix: UnsafeRawBufferPointer, ciphertext: UnsafeRawBufferPointer)
        throws(CryptoError) -> OpenedFrame
    {
        guard usable else { throw .channelUnusable }
        usable = false  // until this frame proves authentic
        guard lengthPrefix.count == WireLimits.frameHeaderBytes,
            ciphertext.count >= WireLimits.frameCiphertextBytesMin,
            ciphertext.count <= WireLimits.frameCiphertextBytesMax
        else { throw .channelDecryptionFailed }
        var tag: UInt8 = 0
        var status: Int32 = -1
        let plaintext = [UInt8](unsafeUninitializedCapacity: ciphertext.count - WireLimits.secretstreamOverheadBytes) {
            out, initialized in
            var produced: UInt64 = 0
            status = crypto_secretstream_xchacha20poly1305_pull(
                &state, out.baseAddress, &produced, &tag,
                ciphertext.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(ciphertext.count),
                lengthPrefix.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(lengthPrefix.count))
            initialized = status == 0 ? Int(produced) : 0
        }
        guard status == 0 else { throw .channelDecryptionFailed }
        switch tag {
        case SecretStreamTag.message:
            usable = true
            return OpenedFrame(plaintext: plaintext, isFinal: false)
        case SecretStreamTag.final:
            return OpenedFrame(plaintext: plaintext, isFinal: true)
        default:
            throw .channelUnexpectedTag(tag)
        }
    }
}
