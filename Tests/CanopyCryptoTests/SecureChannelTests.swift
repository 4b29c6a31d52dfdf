import CSodium
import CanopyCore
import CanopyWire
import Testing
@testable import CanopyCrypto

@Suite("Secure channel")
struct SecureChannelTests {
    /// Both ends of a freshly established connection (alice initiated, bob responded).
    static func channels() throws -> (alice: SecureChannel, bob: SecureChannel) {
        var run = HandshakeRun(
            initiator: Fixture.configuration(Fixture.alice, allowing: [Fixture.bob]),
            responder: Fixture.configuration(Fixture.bob, allowing: [Fixture.alice]))
        run.run()
        var aliceRandom = Fixture.entropy(11)
        var bobRandom = Fixture.entropy(12)
        return (
            SecureChannel(session: try #require(run.initiatorResult.session), random: &aliceRandom),
            SecureChannel(session: try #require(run.responderResult.session), random: &bobRandom)
        )
    }

    @Test("frames flow both ways, including empty and maximum-size plaintexts, and FINAL closes")
    func roundTrip() throws {
        var (alice, bob) = try Self.channels()
        let big = [UInt8](repeating: 0x5A, count: WireLimits.framePlaintextBytesMax)
        let sent = try alice.seal([1, 2, 3]) + alice.seal([]) + alice.seal(big)
        #expect(try bob.receive(sent) == [.message([1, 2, 3]), .message([]), .message(big)])
        #expect(try alice.receive(bob.seal(Array("pong".utf8))) == [.message(Array("pong".utf8))])
        #expect(try bob.receive(alice.seal([9], final: true)) == [.message([9]), .finished])
        try bob.receiveEnd()
        #expect(bob.peerFinished)
        #expect(throws: CryptoError.channelUnusable) { try alice.seal([1]) }
    }

    @Test("frames decode the same byte by byte, all at once and in random chunks of slices or arrays")
    func chunking() throws {
        var (alice, reference) = try Self.channels()
        var stream: [UInt8] = []
        for size in [0, 1, 17, 100, 5000, 70_000] { stream += try alice.seal([UInt8](repeating: UInt8(size & 0xFF), count: size)) }
        stream += try alice.seal([], final: true)
        let expected = try reference.receive(stream)
        var random = SplitMix64(seed: 42)
        // Chunkings 0–2 pass slices (always copied), 3 passes arrays (adopted without copying
        // while whole frames arrive, copied once a partial frame must wait).
        for chunking in 0..<4 {
            var (_, bob) = try Self.channels()
            var events: [ChannelEvent] = []
            var index = 0
            while index < stream.count {
                let size = chunking == 0 ? 1 : chunking == 1 ? stream.count : Int(random.next() % 4000) + 1
                let end = min(stream.count, index + size)
                events += try chunking == 3 ? bob.receive(Array(stream[index..<end])) : bob.receive(stream[index..<end])
                index = end
            }
            #expect(events == expected)
        }
    }

    @Test("a flipped bit anywhere in a frame fails it and poisons the channel")
    func tamperedCiphertext() throws {
        var (alice, _) = try Self.channels()
        let first = try alice.seal(Array("hello".utf8))
        let second = try alice.seal(Array("world".utf8))
        for index in WireLimits.secretstreamHeaderBytes..<first.count {
            var (_, bob) = try Self.channels()
            var tampered = first
            tampered[index] ^= 0x80
            // A flipped length bit may claim a longer frame: supply bytes until it is complete.
            #expect(throws: CryptoError.self) { try bob.receive(tampered + [UInt8](repeating: 0, count: 40_000)) }
            // Poisoned: the genuine frames are refused too, so nothing after the failure is used.
            #expect(throws: CryptoError.self) { try bob.receive(second) }
            #expect(throws: CryptoError.self) { try bob.receiveEnd() }
            #expect(throws: CryptoError.channelUnusable) { try bob.seal([1]) }
        }
    }

    @Test("a replayed frame is refused and the channel stays failed")
    func replay() throws {
        var (alice, bob) = try Self.channels()
        let first = try alice.seal([1])
        let frame = Array(first.dropFirst(WireLimits.secretstreamHeaderBytes))
        #expect(try bob.receive(first) == [.message([1])])
        #expect(throws: CryptoError.channelDecryptionFailed) { try bob.receive(frame) }
        #expect(throws: CryptoError.channelDecryptionFailed) { try bob.receive(alice.seal([2])) }
    }

    @Test("a frame reflected back to its sender does not open")
    func reflection() throws {
        var (alice, _) = try Self.channels()
        let own = try alice.seal([7, 7, 7])
        #expect(throws: CryptoError.channelDecryptionFailed) { try alice.receive(own) }
    }

    @Test("frames swapped in order are refused")
    func reordering() throws {
        var (alice, bob) = try Self.channels()
        let first = try alice.seal([1])
        let second = try alice.seal([2])
        let header = Array(first.prefix(WireLimits.secretstreamHeaderBytes))
        #expect(throws: CryptoError.channelDecryptionFailed) {
            try bob.receive(header + second)
        }
    }

    @Test("the end of the stream without FINAL is an error, also mid-frame")
    func endWithoutFinal() throws {
        var (alice, bob) = try Self.channels()
        let frames = try alice.seal([1]) + alice.seal([2, 2])
        #expect(try bob.receive(frames.dropLast(3)) == [.message([1])])
        #expect(throws: CryptoError.channelEndedWithoutFinal) { try bob.receiveEnd() }
        var (_, idle) = try Self.channels()
        #expect(throws: CryptoError.channelEndedWithoutFinal) { try idle.receiveEnd() }
    }

    @Test("bytes after FINAL are refused, in the same read or a later one")
    func dataAfterFinal() throws {
        var (alice, bob) = try Self.channels()
        let closing = try alice.seal([], final: true)
        #expect(throws: CryptoError.channelDataAfterFinal) { try bob.receive(closing + [0]) }
        var (alice2, bob2) = try Self.channels()
        #expect(try bob2.receive(alice2.seal([], final: true)) == [.finished])
        #expect(throws: CryptoError.channelDataAfterFinal) { try bob2.receive([0, 0, 0, 17]) }
        _ = alice
    }

    @Test("a length prefix over the maximum fails from the prefix alone; below the minimum too")
    func lengthBounds() throws {
        var (alice, bob) = try Self.channels()
        let header = Array(try alice.seal([]).prefix(WireLimits.secretstreamHeaderBytes))
        let tooLong = WireLimits.frameCiphertextBytesMax + 1
        let prefix: [UInt8] = [UInt8(tooLong >> 24), UInt8(tooLong >> 16 & 0xFF), UInt8(tooLong >> 8 & 0xFF), UInt8(tooLong & 0xFF)]
        #expect(throws: CryptoError.channelFraming(.frameTooLong(declaredBytes: tooLong, maxBytes: WireLimits.frameCiphertextBytesMax))) {
            try bob.receive(header + prefix)
        }
        var (_, other) = try Self.channels()
        #expect(throws: CryptoError.channelFraming(.frameTooShort(declaredBytes: 16, minBytes: 17))) {
            try other.receive(header + [0, 0, 0, 16])
        }
    }

    @Test("a plaintext over the maximum is refused before sealing")
    func plaintextTooLarge() throws {
        var (alice, _) = try Self.channels()
        let size = WireLimits.framePlaintextBytesMax + 1
        #expect(throws: CryptoError.plaintextTooLarge(size)) { try alice.seal([UInt8](repeating: 0, count: size)) }
    }

    @Test("init_pull on a header builds the same state init_push does, so injected headers are sound")
    func injectedHeaderMatchesLibsodium() {
        Sodium.ensureInitialized()
        let key = Fixture.filled(0x42)
        var pushed = crypto_secretstream_xchacha20poly1305_state()
        var header = [UInt8](repeating: 0, count: WireLimits.secretstreamHeaderBytes)
        crypto_secretstream_xchacha20poly1305_init_push(&pushed, &header, key)
        var pulled = crypto_secretstream_xchacha20poly1305_state()
        crypto_secretstream_xchacha20poly1305_init_pull(&pulled, header, key)
        let a = withUnsafeBytes(of: pushed) { Array($0) }
        let b = withUnsafeBytes(of: pulled) { Array($0) }
        #expect(a == b)
        #expect(crypto_secretstream_xchacha20poly1305_abytes() == WireLimits.secretstreamOverheadBytes)
        #expect(crypto_secretstream_xchacha20poly1305_headerbytes() == WireLimits.secretstreamHeaderBytes)
    }
}
