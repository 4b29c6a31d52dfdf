/// Reassembles messages from decrypted frame plaintexts (§5.3): strips each plaintext's flags
/// byte, appends the fragment, and hands out the message when a fragment without the
/// `moreFragments` flag arrives.
///
/// Invariants: the buffer never holds more than `WireLimits.messageBytesMax` bytes — the check
/// happens before it grows; a plaintext with no flags byte or with reserved flag bits set is a
/// protocol error; after any error the assembler is poisoned and refuses everything after it.
public struct MessageAssembler: Sendable {
    /// The outcome of feeding one plaintext.
    public enum Step: Equatable, Sendable {
        /// The fragment was buffered; the message continues in a later frame.
        case incomplete
        /// A whole message (type byte first). A message that came in one fragment is a slice of
        /// that plaintext, not a copy.
        case message(ArraySlice<UInt8>)
        /// The plaintext violates the fragment rules; the connection must close.
        case failure(ProtocolError)
    }

    /// The largest message this assembler accepts.
    public let messageBytesMax: Int
    private var buffer: [UInt8] = []
    private var poisoned: ProtocolError?

    /// An assembler accepting messages up to `messageBytesMax` (may be lowered, never raised).
    public init(messageBytesMax: Int = WireLimits.messageBytesMax) {
        precondition((1...WireLimits.messageBytesMax).contains(messageBytesMax), "message maximum outside bounds")
        self.messageBytesMax = messageBytesMax
    }

    /// Bytes of a message buffered so far (0 between messages).
    public var bufferedCount: Int { buffer.count }

    /// Feeds one decrypted frame plaintext.
    public mutating func append(plaintext: [UInt8]) -> Step {
        append(plaintext: plaintext[...])
    }

    /// Feeds one decrypted frame plaintext.
    public mutating func append(plaintext: ArraySlice<UInt8>) -> Step {
        if let poisoned { return .failure(poisoned) }
        guard let flags = plaintext.first else { return fail(.emptyPlaintext) }
        if flags & MessageFragmenter.reservedFlagsMask != 0 { return fail(.reservedFragmentFlags(flags)) }
        let fragmentCount = plaintext.count - 1
        if fragmentCount > messageBytesMax - buffer.count {
            return fail(.messageTooLong(bytes: buffer.count + fragmentCount, maxBytes: messageBytesMax))
        }
        let last = flags & MessageFragmenter.moreFragmentsFlag == 0
        // A whole message in one fragment: hand out the plaintext itself.
        if last && buffer.isEmpty { return .message(plaintext.dropFirst()) }
        buffer.append(contentsOf: plaintext.dropFirst())
        if !last { return .incomplete }
        defer { buffer = [] }
        return .message(buffer[...])
    }

    private mutating func fail(_ error: ProtocolError) -> Step {
        poisoned = error
        buffer = []
        return .failure(error)
    }
}
