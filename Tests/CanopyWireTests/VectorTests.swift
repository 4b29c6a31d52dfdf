import CanopyCore
import Foundation
import Testing
@testable import CanopyWire

/// Checks `Protocol/vectors/` against the code. With `CANOPY_WRITE_VECTORS=1` the files are first
/// written from `VectorFixtures` (review the diff before committing).
@Suite("Protocol test vectors", .serialized)
struct VectorTests {
    @Test("every message vector decodes to its fixture and re-encodes byte for byte")
    func messages() throws {
        if VectorFiles.regenerating { try writeMessages() }
        let file = try VectorFiles.readJSON("Protocol/vectors/messages.json")
        let valid = try #require(file["valid"] as? [[String: String]])
        let fixtures = Dictionary(uniqueKeysWithValues: VectorFixtures.validMessages.map { ($0.name, $0.message) })
        #expect(valid.count == fixtures.count)
        var typesSeen = Set<MessageType>()
        for vector in valid {
            let name = try #require(vector["name"])
            let fixture = try #require(fixtures[name], "vector \(name) has no fixture")
            let bytes = try VectorFiles.bytes(hex: try #require(vector["hex"]))
            #expect(try Message.decode(bytes) == fixture, "\(name)")
            #expect(fixture.encoded() == bytes, "\(name)")
            #expect(vector["type"] == fixture.type.description)
            typesSeen.insert(fixture.type)
        }
        #expect(typesSeen == Set(MessageType.allCases), "every message type has a vector")

        let invalid = try #require(file["invalid"] as? [[String: String]])
        #expect(invalid.count == VectorFixtures.invalidMessages.count)
        for vector in invalid {
            let name = try #require(vector["name"])
            let bytes = try VectorFiles.bytes(hex: try #require(vector["hex"]))
            do {
                _ = try Message.decode(bytes)
                Issue.record("invalid vector \(name) decoded")
            } catch {
                #expect(error.code.description == vector["error"], "\(name): \(error)")
            }
        }
    }

    private func writeMessages() throws {
        let valid = VectorFixtures.validMessages.map { name, message in
            ["name": name, "type": message.type.description, "hex": VectorFiles.hex(message.encoded())]
        }
        let invalid = VectorFixtures.invalidMessages.map { name, bytes, code in
            ["name": name, "hex": VectorFiles.hex(bytes), "error": code.description]
        }
        try VectorFiles.writeJSON(["valid": valid, "invalid": invalid], to: "Protocol/vectors/messages.json")
    }

    /// Frame streams: (name, ciphertext lengths) for valid ones, (name, stream) for invalid ones.
    static let frameStreams: [(name: String, ciphertexts: [[UInt8]])] = [
        ("minimum-frame", [Array(0..<17)]),
        ("two-frames", [Array(repeating: 0xAA, count: 20), Array(100..<117)]),
    ]
    static let badStreams: [(name: String, stream: [UInt8])] = [
        ("length-0", [0, 0, 0, 0]),
        ("length-16", [0, 0, 0, 16] + [UInt8](repeating: 0, count: 16)),
        ("length-one-over-maximum", FrameEncoder.header(ciphertextCount: WireLimits.frameCiphertextBytesMax).withLastIncremented),
        ("length-ffffffff", [0xFF, 0xFF, 0xFF, 0xFF]),
    ]
    static let fragmentCases: [(name: String, plaintexts: [[UInt8]], message: [UInt8]?)] = {
        let changes = VectorFixtures.exampleExchange[5].message.encoded()
        return [
            ("single-fragment", [[0x00, 0x0C]], [0x0C]),
            ("three-fragments", [[0x01] + changes[..<10], [0x01] + changes[10..<11], [0x00] + changes[11...]], changes),
            ("reserved-flag", [[0x02, 0x0C]], nil),
            ("empty-plaintext", [[]], nil),
        ]
    }()

    @Test("every frame vector splits, or fails, as the file says; every fragment vector reassembles")
    func frames() throws {
        if VectorFiles.regenerating { try writeFrames() }
        let file = try VectorFiles.readJSON("Protocol/vectors/frames.json")
        for vector in try #require(file["valid"] as? [[String: Any]]) {
            var buffer = try VectorFiles.bytes(hex: try #require(vector["stream"] as? String))[...]
            let expected = try #require(vector["ciphertexts"] as? [String]).map { try VectorFiles.bytes(hex: $0) }
            var decoder = FrameDecoder()
            var frames: [[UInt8]] = []
            while case .frame(let ciphertext) = decoder.decode(from: &buffer) { frames.append(Array(ciphertext)) }
            #expect(frames == expected && buffer.isEmpty, "\(vector["name"] ?? "")")
        }
        for vector in try #require(file["invalid"] as? [[String: String]]) {
            var buffer = try VectorFiles.bytes(hex: try #require(vector["stream"]))[...]
            var decoder = FrameDecoder()
            guard case .failure(let error) = decoder.decode(from: &buffer) else {
                Issue.record("\(vector["name"] ?? "") did not fail"); continue
            }
            #expect(error.code.description == vector["error"])
        }
        for vector in try #require(file["fragments"] as? [[String: Any]]) {
            var assembler = MessageAssembler()
            var last: MessageAssembler.Step = .incomplete
            for plaintext in try #require(vector["plaintexts"] as? [String]) {
                last = assembler.append(plaintext: try VectorFiles.bytes(hex: plaintext))
            }
            if let message = vector["message"] as? String {
                #expect(last == .message(try VectorFiles.bytes(hex: message)[...]))
            } else {
                guard case .failure(let error) = last else { Issue.record("fragment vector did not fail"); continue }
                #expect(error.code.description == vector["error"] as? String)
            }
        }
    }

    private func writeFrames() throws {
        let valid = Self.frameStreams.map { name, ciphertexts -> [String: Any] in
            var stream: [UInt8] = []
            for ciphertext in ciphertexts { FrameEncoder.encode(ciphertext: ciphertext, into: &stream) }
            return ["name": name, "stream": VectorFiles.hex(stream), "ciphertexts": ciphertexts.map { VectorFiles.hex($0) }]
        }
        let invalid = Self.badStreams.map { name, stream in
            ["name": name, "stream": VectorFiles.hex(stream), "error": ErrorCode.malformedFrame.description]
        }
        let fragments = Self.fragmentCases.map { name, plaintexts, message -> [String: Any] in
            var row: [String: Any] = ["name": name, "plaintexts": plaintexts.map { VectorFiles.hex($0) }]
            if let message { row["message"] = VectorFiles.hex(message) } else { row["error"] = ErrorCode.malformedFrame.description }
            return row
        }
        try VectorFiles.writeJSON(["valid": valid, "invalid": invalid, "fragments": fragments], to: "Protocol/vectors/frames.json")
    }
}
