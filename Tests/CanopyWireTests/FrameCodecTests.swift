import CanopyCore
import Testing
@testable import CanopyWire

@Suite("Frame decoder and encoder")
struct FrameCodecTests {
    /// Fake ciphertexts of the given lengths (the decoder never looks inside them).
    private func stream(ciphertextLengths: [Int]) -> (bytes: [UInt8], ciphertexts: [[UInt8]]) {
        var bytes: [UInt8] = []
        var ciphertexts: [[UInt8]] = []
        for (index, length) in ciphertextLengths.enumerated() {
            let ciphertext = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ index) }
            FrameEncoder.encode(ciphertext: ciphertext, into: &bytes)
            ciphertexts.append(ciphertext)
        }
        return (bytes, ciphertexts)
    }

    /// Feeds `bytes` to a decoder in the given chunk sizes, asserting that "need more bytes"
    /// never consumes anything, and returns the frames decoded.
    private func decodeInChunks(_ bytes: [UInt8], chunkSizes: some Sequence<Int>) -> [[UInt8]] {
        var decoder = FrameDecoder()
        var buffer: ArraySlice<UInt8> = []
        var frames: [[UInt8]] = []
        var offset = 0
        var sizes = chunkSizes.makeIterator()
        while offset < bytes.count {
            let size = min(sizes.next() ?? bytes.count, bytes.count - offset)
            buffer.append(contentsOf: bytes[offset..<(offset + size)])
            offset += size
            loop: while true {
                let before = buffer
                switch decoder.decode(from: &buffer) {
                case .needMoreBytes(let atLeast):
                    #expect(buffer == before && buffer.startIndex == before.startIndex)
                    #expect(atLeast > 0)
                    break loop
                case .frame(let ciphertext): frames.append(Array(ciphertext))
                case .failure(let error): Issue.record("unexpected failure \(error)"); return frames
                }
            }
        }
        #expect(buffer.isEmpty)
        return frames
    }

    @Test("frames decode identically byte by byte, all at once and in seeded random chunks")
    func chunking() {
        let (bytes, ciphertexts) = stream(ciphertextLengths: [17, 18, 100, 4096, 17, 70_000])
        #expect(decodeInChunks(bytes, chunkSizes: repeatElement(1, count: bytes.count)) == ciphertexts)
        #expect(decodeInChunks(bytes, chunkSizes: [bytes.count]) == ciphertexts)
        for seed in UInt64(0)..<20 {
            var random = SplitMix64(seed: seed)
            let sizes = (0..<bytes.count).map { _ in Int(random.next() % 9000) + 1 }
            #expect(decodeInChunks(bytes, chunkSizes: sizes) == ciphertexts)
        }
    }

    @Test("a length prefix over the maximum fails from the four header bytes alone")
    func overMaximum() {
        var decoder = FrameDecoder()
        // Only the header is present: the decoder cannot have buffered or allocated the body.
        var buffer: ArraySlice<UInt8> = [0xFF, 0xFF, 0xFF, 0xFF]
        #expect(decoder.decode(from: &buffer)
            == .failure(.frameTooLong(declaredBytes: 0xFFFF_FFFF, maxBytes: WireLimits.frameCiphertextBytesMax)))
        let oneOver = FrameEncoder.header(ciphertextCount: WireLimits.frameCiphertextBytesMax).withLastIncremented
        var fresh = FrameDecoder()
        var overBuffer = oneOver[...]
        guard case .failure(let error) = fresh.decode(from: &overBuffer) else {
            Issue.record("one byte over the maximum was accepted"); return
        }
        #expect(error.code == .malformedFrame)
    }

    @Test("the largest legal frame length waits for its bytes instead of failing")
    func atMaximum() {
        var decoder = FrameDecoder()
        var buffer = FrameEncoder.header(ciphertextCount: WireLimits.frameCiphertextBytesMax)[...]
        #expect(decoder.decode(from: &buffer) == .needMoreBytes(atLeast: WireLimits.frameCiphertextBytesMax))
    }

    @Test("zero-length and below-minimum frames are refused; the minimum-length frame decodes")
    func minimum() {
        for length in [0, 1, 16] {
            var decoder = FrameDecoder()
            var buffer: ArraySlice<UInt8> = [0, 0, 0, UInt8(length)] + Array(repeating: 0, count: length)
            #expect(decoder.decode(from: &buffer) == .failure(.frameTooShort(declaredBytes: length, minBytes: 17)))
        }
        var decoder = FrameDecoder()
        var buffer: ArraySlice<UInt8> = [0, 0, 0, 17] + Array(repeating: 7, count: 17)
        #expect(decoder.decode(from: &buffer) == .frame(Array(repeating: 7, count: 17)[...]))
    }

    @Test("after a failure the decoder refuses everything, even a valid frame")
    func poisoned() {
        var decoder = FrameDecoder()
        var bad: ArraySlice<UInt8> = [0, 0, 0, 0]
        _ = decoder.decode(from: &bad)
        var good: ArraySlice<UInt8> = [0, 0, 0, 17] + Array(repeating: 0, count: 17)
        #expect(decoder.decode(from: &good) == .failure(.frameTooShort(declaredBytes: 0, minBytes: 17)))
    }

    @Test("a lowered maximum is enforced")
    func loweredMaximum() {
        var decoder = FrameDecoder(ciphertextBytesMax: 100)
        var buffer = FrameEncoder.header(ciphertextCount: 101)[...]
        #expect(decoder.decode(from: &buffer) == .failure(.frameTooLong(declaredBytes: 101, maxBytes: 100)))
    }
}

extension Array where Element == UInt8 {
    /// The same bytes read as a big-endian number, plus one (used to step past a limit).
    var withLastIncremented: [UInt8] {
        var copy = self
        var index = copy.count - 1
        while index >= 0 {
            let (sum, overflow) = copy[index].addingReportingOverflow(1)
            copy[index] = sum
            if !overflow { break }
            index -= 1
        }
        return copy
    }
}
