import CanopyCore
import Testing
@testable import CanopyWire

@Suite("Message codec")
struct MessageCodecTests {
    @Test("random messages of every type survive encode then decode unchanged")
    func roundTrip() throws {
        var generator = RandomMessages(seed: 1)
        for round in 0..<300 {
            for type in MessageType.allCases {
                let message = generator.message(of: type)
                let bytes = message.encoded()
                #expect(bytes.first == type.rawValue)
                let decoded = try Message.decode(bytes)
                #expect(decoded == message, "round \(round), \(type)")
                #expect(decoded.encoded() == bytes)
            }
        }
    }

    @Test("every proper prefix of every message is refused with a protocol error, never a crash")
    func prefixes() {
        var generator = RandomMessages(seed: 2)
        for _ in 0..<20 {
            for type in MessageType.allCases {
                let bytes = generator.message(of: type).encoded()
                for length in 0..<bytes.count {
                    #expect(throws: ProtocolError.self) { try Message.decode(Array(bytes[..<length])) }
                }
            }
        }
    }

    @Test("a byte after the last field is refused")
    func trailing() {
        var generator = RandomMessages(seed: 3)
        for type in MessageType.allCases {
            let bytes = generator.message(of: type).encoded() + [0]
            #expect(throws: ProtocolError.trailingBytes(messageType: type.rawValue, count: 1)) { try Message.decode(bytes) }
        }
    }

    @Test("every type byte this version does not define is unknownMessageType")
    func unknownTypes() {
        let known = Set(MessageType.allCases.map(\.rawValue))
        for byte in UInt8.min...UInt8.max where !known.contains(byte) {
            #expect(throws: ProtocolError.unknownMessageType(byte)) { try Message.decode([byte, 0, 0]) }
            #expect(ProtocolError.unknownMessageType(byte).code == .unknownMessageType)
        }
        #expect(throws: ProtocolError.truncated(field: "message type")) { try Message.decode([]) }
    }

    @Test("messages travel through fragments and frames decoded byte by byte, at once and in random chunks")
    func throughFrames() throws {
        var generator = RandomMessages(seed: 4)
        let messages = (0..<200).map { _ in generator.message() }
        // A stand-in for the secure channel: 17 bytes of padding where the MAC would be.
        var stream: [UInt8] = []
        for message in messages {
            for plaintext in MessageFragmenter.plaintexts(of: message.encoded(), fragmentBytesMax: 37) {
                FrameEncoder.encode(ciphertext: plaintext + [UInt8](repeating: 0xEE, count: 17), into: &stream)
            }
        }
        var chunkings: [[Int]] = [Array(repeating: 1, count: stream.count), [stream.count]]
        var random = SplitMix64(seed: 5)
        chunkings.append((0..<stream.count).map { _ in random.index(below: 300) + 1 })
        for chunks in chunkings {
            #expect(try decodeStream(stream, chunks: chunks) == messages)
        }
    }

    @Test("fragmenting while encoding gives the same plaintexts as encoding, then fragmenting", arguments: [1, 37, WireLimits.fragmentBytesMax])
    func fragmentWhileEncoding(fragmentBytesMax: Int) {
        var generator = RandomMessages(seed: 6)
        for _ in 0..<200 {
            let message = generator.message()
            #expect(MessageFragmenter.plaintexts(encoding: message, fragmentBytesMax: fragmentBytesMax)
                == MessageFragmenter.plaintexts(of: message.encoded(), fragmentBytesMax: fragmentBytesMax))
        }
    }

    private func decodeStream(_ stream: [UInt8], chunks: [Int]) throws -> [Message] {
        var frames = FrameDecoder()
        var assembler = MessageAssembler()
        var buffer: ArraySlice<UInt8> = []
        var decoded: [Message] = []
        var offset = 0
        for chunk in chunks where offset < stream.count {
            let end = min(stream.count, offset + chunk)
            buffer.append(contentsOf: stream[offset..<end])
            offset = end
            while case .frame(let ciphertext) = frames.decode(from: &buffer) {
                switch assembler.append(plaintext: ciphertext.dropLast(17)) {
                case .incomplete: continue
                case .message(let bytes): decoded.append(try Message.decode(bytes))
                case .failure(let error): throw error
                }
            }
        }
        return decoded
    }
}
