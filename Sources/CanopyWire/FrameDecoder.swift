/// Splits the TCP byte stream into frames (`Protocol/replication-v1.md` §5.2):
///
///     frame := u32 big-endian length ‖ ciphertext(length)
///     frameCiphertextBytesMin ≤ length ≤ ciphertextBytesMax
///
/// It is a single-step decoder in swift-nio's style: each call looks at the front of the
/// caller's buffer and either removes exactly one whole frame from it, or reports that more
/// bytes are needed *without consuming anything*, or fails. The length prefix is checked
/// against both bounds as soon as its four bytes are present, before the caller needs to buffer
/// (or this decoder touches) a single ciphertext byte, so a hostile prefix costs nothing.
///
/// After a failure the decoder is poisoned: every later call returns the same failure, because a
/// byte stream cannot be resynchronised once a length is wrong. Decryption is not done here; the
/// ciphertext goes to CanopyCrypto, which authenticates the length prefix as associated data.
public struct FrameDecoder: Sendable {
    /// The outcome of one decoding step.
    public enum Step: Equatable, Sendable {
        /// The buffer holds no whole frame; nothing was consumed. At least `atLeast` more bytes
        /// must arrive before another call can make progress.
        case needMoreBytes(atLeast: Int)
        /// One frame's ciphertext (sharing the caller's storage); its bytes and prefix were
        /// removed from the front of the buffer.
        case frame(ArraySlice<UInt8>)
        /// The stream violates the framing rules; the connection must close.
        case failure(ProtocolError)
    }

    /// The largest ciphertext length this decoder accepts.
    public let ciphertextBytesMax: Int
    /// Set by the first failure; returned by every later call.
    private var poisoned: ProtocolError?
    /// Frames decoded so far (for diagnostics and the replay checks of the secure channel).
    public private(set) var framesDecoded: UInt64 = 0

    /// A decoder accepting ciphertexts up to `ciphertextBytesMax`, which may be lowered (never
    /// raised) from the protocol maximum.
    public init(ciphertextBytesMax: Int = WireLimits.frameCiphertextBytesMax) {
        precondition(
            (WireLimits.frameCiphertextBytesMin...WireLimits.frameCiphertextBytesMax).contains(ciphertextBytesMax),
            "frame maximum outside the protocol's bounds")
        self.ciphertextBytesMax = ciphertextBytesMax
    }

    /// Takes one frame from the front of `buffer` if a whole one is there.
    public mutating func decode(from buffer: inout ArraySlice<UInt8>) -> Step {
        if let poisoned { return .failure(poisoned) }
        let header = WireLimits.frameHeaderBytes
        guard buffer.count >= header else { return .needMoreBytes(atLeast: header - buffer.count) }
        let start = buffer.startIndex
        var declared = 0
        for index in start..<(start + header) { declared = declared << 8 | Int(buffer[index]) }
        if declared < WireLimits.frameCiphertextBytesMin {
            return fail(.frameTooShort(declaredBytes: declared, minBytes: WireLimits.frameCiphertextBytesMin))
        }
        if declared > ciphertextBytesMax {
            return fail(.frameTooLong(declaredBytes: declared, maxBytes: ciphertextBytesMax))
        }
        let total = header + declared
        guard buffer.count >= total else { return .needMoreBytes(atLeast: total - buffer.count) }
        let ciphertext = buffer[(start + header)..<(start + total)]
        buffer = buffer[(start + total)...]
        framesDecoded += 1
        return .frame(ciphertext)
    }

    private mutating func fail(_ error: ProtocolError) -> Step {
        poisoned = error
        return .failure(error)
    }
}
