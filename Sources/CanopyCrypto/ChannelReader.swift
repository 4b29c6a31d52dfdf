import CanopyWire

/// What the receiving side of a secure channel yields.
public enum ChannelEvent: Sendable, Equatable {
    /// One authenticated plaintext, in order.
    case message([UInt8])
    /// The peer closed the stream gracefully (its FINAL frame). Nothing may follow.
    case finished
}

/// Turns the bytes of the peer's direction into plaintexts: first its 24-byte stream header, then
/// frames split by CanopyWire's `FrameDecoder`. An incomplete header or frame consumes nothing and
/// waits for more bytes.
///
///     awaitingHeader ──24 bytes──▶ reading ──FINAL──▶ finished
///            └──────────┬──────────┘            │
///                  any error ──▶ failed ◀── more bytes
///
/// The decoder checks every length prefix against `WireLimits` before the frame is buffered, so a
/// hostile prefix cannot make it allocate. Any error is final: later calls rethrow it.
public struct ChannelReader: Sendable {
    private enum State {
        case awaitingHeader
        case reading(OpeningStream)
        case finished
        case failed(CryptoError)
    }

    private let key: [UInt8]
    private var state: State = .awaitingHeader
    private var decoder = FrameDecoder()
    /// Received bytes not yet decoded: `buffer[consumed...]`.
    private var buffer: [UInt8] = []
    private var consumed = 0
    /// Whether `buffer` is the caller's array, adopted without copying (see `receive`).
    private var adopted = false

    /// A reader for the stream keyed by `key`, starting with any bytes already received.
    public init(key: [UInt8], pending: [UInt8] = []) {
        self.key = key
        self.buffer = pending
    }

    /// Whether the peer has closed gracefully.
    public var isFinished: Bool {
        if case .finished = state { return true }
        return false
    }

    /// Whether the stream failed; the reader refuses everything from now on.
    public var hasFailed: Bool {
        if case .failed = state { return true }
        return false
    }

    /// Feeds bytes from the connection; returns the events they complete, in order.
    public mutating func receive(_ bytes: some Collection<UInt8>) throws(CryptoError) -> [ChannelEvent] {
        switch state {
        case .failed(let error): throw error
        case .finished: if bytes.isEmpty { return [] } else { throw fail(.channelDataAfterFinal) }
        case .awaitingHeader, .reading: break
        }
        if buffer.isEmpty, let array = bytes as? [UInt8] {
            // The common case, whole frames per read: share the caller's storage instead of
            // copying it (copy-on-write copies it only if a partial frame must be kept and grown).
            buffer = array
            adopted = true
        } else {
            buffer.append(contentsOf: bytes)
        }
        var events: [ChannelEvent] = []
        while let stepped = try step() {
            events += stepped
            if case .finished = state {
                if consumed < buffer.count { throw fail(.channelDataAfterFinal) }
                break
            }
        }
        compact()
        return events
    }

    /// The connection ended. Fine after FINAL; otherwise the peer's data may be truncated.
    public mutating func receiveEnd() throws(CryptoError) {
        switch state {
        case .finished: return
        case .failed(let error): throw error
        case .awaitingHeader, .reading: throw fail(.channelEndedWithoutFinal)
        }
    }

    /// Decodes at most the header or one frame from the buffer; nil if more bytes are needed.
    private mutating func step() throws(CryptoError) -> [ChannelEvent]? {
        switch state {
        case .awaitingHeader:
            guard buffer.count - consumed >= WireLimits.secretstreamHeaderBytes else { return nil }
            let header = buffer[consumed..<consumed + WireLimits.secretstreamHeaderBytes]
            do {
                state = .reading(try OpeningStream(key: key, header: header))
            } catch {
                throw fail(error)
            }
            consumed += WireLimits.secretstreamHeaderBytes
            return []
        case .reading(var stream):
            var pending = buffer[consumed...]
            let ciphertext: Range<Int>
            switch decoder.decode(from: &pending) {
            case .needMoreBytes: return nil
            case .failure(let error): throw fail(.channelFraming(error))
            case .frame(let frame): ciphertext = frame.indices
            }
            let prefix = ciphertext.lowerBound - WireLimits.frameHeaderBytes..<ciphertext.lowerBound
            // withUnsafeBytes only rethrows untyped errors, so carry the typed one out in a Result.
            let result = buffer.withUnsafeBytes { raw in
                Result { () throws(CryptoError) in
                    try stream.open(
                        lengthPrefix: UnsafeRawBufferPointer(rebasing: raw[prefix]),
                        ciphertext: UnsafeRawBufferPointer(rebasing: raw[ciphertext]))
                }
            }
            consumed = ciphertext.upperBound
            switch result {
            case .failure(let error):
                throw fail(error)
            case .success(let opened) where opened.isFinal:
                state = .finished
                return opened.plaintext.isEmpty ? [.finished] : [.message(opened.plaintext), .finished]
            case .success(let opened):
                state = .reading(stream)
                return [.message(opened.plaintext)]
            }
        case .finished, .failed:
            return nil
        }
    }

    private mutating func fail(_ error: CryptoError) -> CryptoError {
        state = .failed(error)
        buffer = []
        consumed = 0
        return error
    }

    /// Drops consumed bytes once they are the larger part of the buffer, so memory stays bounded
    /// by about one frame plus one read while copying stays amortised O(1) per byte.
    private mutating func compact() {
        if consumed == buffer.count {
            // Keep our own storage for the next partial read; let go of an adopted one.
            if adopted { buffer = [] } else { buffer.removeAll(keepingCapacity: true) }
            adopted = false
            consumed = 0
        } else if consumed > buffer.count / 2 {
            buffer.removeFirst(consumed)
            adopted = false
            consumed = 0
        }
    }
}
