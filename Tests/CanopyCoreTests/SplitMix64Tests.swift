import Testing
import CanopyCore

@Suite("SplitMix64")
struct SplitMix64Tests {
    @Test("the generator's output is pinned, so seeds replay across Swift versions")
    func pinnedOutput() {
        var generator = SplitMix64(seed: 0)
        #expect(generator.next() == 0xE220_A839_7B1D_CDAF)
        #expect(generator.next() == 0x6E78_9E6A_A1B9_65F4)
        #expect(generator.next() == 0x06C4_5D18_8009_454F)
        var seeded = SplitMix64(seed: 42)
        var again = SplitMix64(seed: 42)
        #expect((0..<100).map { _ in seeded.next(below: 7) } == (0..<100).map { _ in again.next(below: 7) })
    }

    @Test("shuffling is a permutation and depends only on the seed")
    func shuffle() {
        var a = SplitMix64(seed: 7)
        var b = SplitMix64(seed: 7)
        let items = Array(0..<50)
        let first = a.shuffled(items)
        #expect(first == b.shuffled(items))
        #expect(first.sorted() == items)
        #expect(first != items)
    }
}
