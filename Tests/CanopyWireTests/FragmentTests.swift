import CanopyCore
import Testing
@testable import CanopyWire

@Suite("Fragments and message reassembly")
struct FragmentTests {
    @Test("a message split into fragments reassembles to the same bytes", arguments: [1, 2, 5, 100, 1000])
    func roundTrip(messageLength: Int) {
        var random = SplitMix64(seed: UInt64(messageLength))
        let message = (0..<messageLength).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        for fragmentSize in [1, 3, 64, WireLimits.fragmentBytesMax] {
            let plaintexts = MessageFragmenter.plaintexts(of: message, fragmentBytesMax: fragmentSize)
            #expect(plaintexts.count == max(1, (messageLength + fragmentSize - 1) / fragmentSize))
            var assembler = MessageAssembler()
            for plaintext in plaintexts.dropLast() { #expect(assembler.append(plaintext: plaintext) == .incomplete) }
            #expect(assembler.append(plaintext: plaintexts.last!) == .message(message[...]))
            #expect(assembler.bufferedCount == 0)
        }
    }

    @Test("a 16 MiB body travels in frames of at most 1 MiB plaintext")
    func largeMessage() {
        let message = [UInt8](repeating: 0x5A, count: WireLimits.bodyBytesMax + 100)
        let plaintexts = MessageFragmenter.plaintexts(of: message)
        #expect(plaintexts.allSatisfy { $0.count <= WireLimits.framePlaintextBytesMax })
        #expect(plaintexts.count == 17)
        var assembler = MessageAssembler()
        var result: MessageAssembler.Step = .incomplete
        for plaintext in plaintexts { result = assembler.append(plaintext: plaintext) }
        #expect(result == .message(message[...]))
    }

    @Test("an empty plaintext and reserved flag bits are fatal")
    func badFlags() {
        var assembler = MessageAssembler()
        #expect(assembler.append(plaintext: [UInt8]()) == .failure(.emptyPlaintext))
        for flags: UInt8 in [0x02, 0x80, 0xFF] {
            var fresh = MessageAssembler()
            #expect(fresh.append(plaintext: [flags, 1]) == .failure(.reservedFragmentFlags(flags)))
        }
    }

    @Test("reassembly beyond the message maximum fails before the buffer grows")
    func tooLong() {
        var assembler = MessageAssembler(messageBytesMax: 10)
        #expect(assembler.append(plaintext: [1] + [UInt8](repeating: 0, count: 6)) == .incomplete)
        #expect(assembler.append(plaintext: [0] + [UInt8](repeating: 0, count: 5))
            == .failure(.messageTooLong(bytes: 11, maxBytes: 10)))
        #expect(assembler.bufferedCount == 0)
        #expect(assembler.append(plaintext: [0, 1]) == .failure(.messageTooLong(bytes: 11, maxBytes: 10)))
    }
}
