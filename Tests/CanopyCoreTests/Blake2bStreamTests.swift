import Testing

@testable import CanopyCore

@Suite("BLAKE2b over content in parts")
struct Blake2bStreamTests {
    @Test("the digest of content fed in parts of any size is the one-shot digest of the whole, for every output size")
    func partsMatchTheWhole() {
        var random = SplitMix64(seed: 7)
        let content = (0..<100_003).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        for outputBytes in [16, 32, 64] {
            let whole = Blake2b.hash(content, outputBytes: outputBytes)
            for partSize in [1, 63, 64, 65, 4096, 100_003] {
                let stream = Blake2bStream(outputBytes: outputBytes)
                var offset = 0
                while offset < content.count {
                    let end = min(offset + partSize, content.count)
                    stream.update(content[offset..<end])
                    offset = end
                }
                #expect(stream.finish() == whole, "output \(outputBytes), parts of \(partSize)")
            }
        }
        #expect(Blake2bStream().finish() == Blake2b.hash([]), "nothing fed is the digest of empty content")
    }
}
