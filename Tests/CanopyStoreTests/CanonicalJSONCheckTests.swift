import CanopyCore
import Foundation
import Testing
@testable import CanopyStore

/// `CanonicalJSONCheck` scans 8 bytes at a time and validates UTF-8 inside the scan. These tests
/// hold it to a slow oracle: bytes are canonical exactly when they are valid UTF-8, parse as a
/// JSON object, and re-encode to themselves.
@Suite("Canonical form check")
struct CanonicalJSONCheckTests {
    /// Pieces strings are built from: plain ASCII, the characters that need escapes, controls,
    /// DEL, and one-, two-, three- and four-byte UTF-8.
    private static let pieces = ["a", "Z", " ", "lorem ipsum ", "\"", "\\", "/", "\n", "\t", "\u{1}", "\u{1f}", "\u{7f}", "é", "ß", "漢", "€", "😀", "\u{10FFFF}"]

    private func randomString(_ random: inout SplitMix64) -> String {
        (0..<Int.random(in: 0...12, using: &random)).map { _ in Self.pieces[Int(random.next() % UInt64(Self.pieces.count))] }.joined()
    }

    private func randomValue(_ random: inout SplitMix64, depth: Int) -> JSONValue {
        switch random.next() % (depth < 3 ? 8 : 6) {
        case 0: return .null
        case 1: return .bool(random.next() % 2 == 0)
        case 2: return .int(Int64(bitPattern: random.next()) >> Int64(random.next() % 64))
        case 3: return .double(Double(Int64(bitPattern: random.next()) % 1_000_000) / 64)
        case 4, 5: return .string(randomString(&random))
        case 6: return .array((0..<Int.random(in: 0...4, using: &random)).map { _ in randomValue(&random, depth: depth + 1) })
        default: return randomObject(&random, depth: depth + 1)
        }
    }

    private func randomObject(_ random: inout SplitMix64, depth: Int) -> JSONValue {
        var members: [String: JSONValue] = [:]
        for _ in 0..<Int.random(in: 0...5, using: &random) { members[randomString(&random)] = randomValue(&random, depth: depth) }
        return .object(members)
    }

    /// The slow, obviously right answer.
    private func oracle(_ bytes: [UInt8]) -> Bool {
        guard String(validating: bytes, as: UTF8.self) != nil, let value = try? JSONValue.parse(Data(bytes)),
            case .object = value
        else { return false }
        return CanonicalJSON.encode(value) == bytes
    }

    @Test("every body CanonicalJSON writes passes", arguments: [1, 2, 3])
    func encodedBodiesPass(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        for _ in 0..<300 {
            let bytes = CanonicalJSON.encode(randomObject(&random, depth: 0))
            #expect(CanonicalJSONCheck.problem(in: bytes) == nil, "refused \(String(decoding: bytes, as: UTF8.self))")
        }
    }

    @Test("a changed, inserted or removed byte is accepted exactly when the oracle accepts it", arguments: [1, 2, 3, 4])
    func mutationsMatchOracle(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        // Bytes that matter to the grammar, to the 8-byte scan and to UTF-8 well-formedness.
        let interesting: [UInt8] = [0x00, 0x1F, 0x20, 0x22, 0x2C, 0x30, 0x3A, 0x5C, 0x5D, 0x61, 0x75, 0x7B, 0x7D, 0x7F,
                                    0x80, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF]
        for _ in 0..<1_500 {
            var bytes = CanonicalJSON.encode(randomObject(&random, depth: 0))
            guard bytes.count > 2 else { continue }
            let position = Int(random.next() % UInt64(bytes.count))
            let byte = interesting[Int(random.next() % UInt64(interesting.count))]
            switch random.next() % 3 {
            case 0: bytes[position] = byte
            case 1: bytes.insert(byte, at: position)
            default: bytes.remove(at: position)
            }
            let accepted = CanonicalJSONCheck.problem(in: bytes) == nil
            #expect(accepted == oracle(bytes), "\(bytes)")
        }
    }

    @Test("the word scan stops at the first byte that needs a look wherever one or two such bytes fall in a word")
    func scanStopsAtFirstFlaggedByte() {
        // A string of plain bytes with one or two special bytes at every pair of offsets over
        // five words (two and a half 16-byte blocks): the scan skips whole blocks without a
        // special byte, then jumps straight to the lowest flagged byte of a word, which is right
        // only if a flag can never be wrong below a right one. The bytes next to the printable
        // range (0x1F, 0x20, 0x7E, 0x7F, 0x80) are where a wrapping vector compare would err.
        let specials: [[UInt8]] = [[0x22], [0x5C, 0x6E], [0x00], [0x01], [0x1F], [0x20], [0x7E], [0x7F], [0x80], [0xC3, 0xA9], [0xE2, 0x82, 0xAC], [0xFF], [0x5C, 0x75, 0x30, 0x30, 0x31, 0x66]]
        for first in 0..<40 {
            for second in [nil] + Array(first..<40) {
                for a in specials.indices {
                    let b = (a * 7 + first + (second ?? 0)) % specials.count
                    var text = [UInt8](repeating: UInt8(ascii: "x"), count: 42)
                    if let second { text.insert(contentsOf: specials[b], at: second + 1) }
                    text.insert(contentsOf: specials[a], at: first)
                    let bytes = Array("{\"k\":\"".utf8) + text + Array("\"}".utf8)
                    let accepted = CanonicalJSONCheck.problem(in: bytes) == nil
                    #expect(accepted == oracle(bytes), "\(bytes)")
                }
            }
        }
    }
}
