import Testing
@testable import CanopyCore

@Suite("Canonical JSON")
struct CanonicalJSONTests {
    private func canonical(_ text: String) throws -> String {
        String(decoding: CanonicalJSON.encode(try JSONValue.parse(text)), as: UTF8.self)
    }

    @Test("object keys sort by UTF-8 bytes and whitespace disappears")
    func sortsKeys() throws {
        #expect(try canonical(#"{ "b": 1, "a": 2, "A": 3, "é": 4, "z": 5 }"#) == #"{"A":3,"a":2,"b":1,"z":5,"é":4}"#)
        #expect(try canonical(#"{"\u20ac":1,"\ud83d\ude00":2,"\u00ff":3}"#) == "{\"ÿ\":3,\"€\":1,\"😀\":2}")
    }

    @Test("strings escape only quote, backslash and control characters")
    func escapes() throws {
        #expect(try canonical(#"["a\"b\\c\/d\u0001\b\t\n\f\r\u001f\u007f\u2028"]"#)
            == "[\"a\\\"b\\\\c/d\\u0001\\b\\t\\n\\f\\r\\u001f\u{7f}\u{2028}\"]")
    }

    @Test("a character that needs an escape is found at every position of a long string")
    func escapesAtEveryOffset() {
        let escapes: [(Character, String)] = [("\"", "\\\""), ("\\", "\\\\"), ("\u{0}", "\\u0000"), ("\u{1f}", "\\u001f"), ("\n", "\\n")]
        for (character, escaped) in escapes {
            for position in 0...24 {
                // ASCII and two-byte UTF-8 around it, so the special byte falls at every offset
                // of the eight-byte words the encoder scans.
                let prefix = String(repeating: "aé", count: position / 3) + String(repeating: "b", count: position % 3)
                let suffix = String(repeating: "c€", count: 5)
                let bytes = CanonicalJSON.encode(.string(prefix + String(character) + suffix))
                #expect(String(decoding: bytes, as: UTF8.self) == "\"" + prefix + escaped + suffix + "\"")
            }
        }
    }

    @Test("numbers take their shortest round-trip form", arguments: [
        ("0", "0"), ("-0", "0"), ("-0.0", "0"), ("1.0", "1"), ("1e2", "100"), ("1.5", "1.5"),
        ("-12.25", "-12.25"), ("0.000001", "0.000001"), ("1e-7", "1e-7"), ("123e-20", "1.23e-18"),
        ("1e21", "1e+21"), ("1e20", "100000000000000000000"), ("9007199254740993", "9007199254740993"),
        ("9223372036854775807", "9223372036854775807"), ("-9223372036854775808", "-9223372036854775808"),
        ("0.1", "0.1"), ("5e-324", "5e-324"), ("1.7976931348623157e308", "1.7976931348623157e+308"),
        ("333333333.33333329", "333333333.3333333"), ("4.5", "4.5"), ("2e-3", "0.002"),
    ])
    func numbers(input: String, expected: String) throws {
        #expect(try canonical(input) == expected)
    }

    @Test("integers are written in decimal exactly as Swift spells them, at every digit count and sign")
    func integers() {
        var samples: [Int64] = [0, 1, -1, 9, -9, 10, -10, .max, .min, .max - 1, .min + 1]
        var power: Int64 = 1
        for _ in 0..<18 {
            power *= 10
            samples += [power - 1, power, power + 1, -power + 1, -power, -power - 1]
        }
        var random = SplitMix64(seed: 7)
        samples += (0..<500).map { _ in Int64(bitPattern: random.next()) >> (random.next() % 64) }
        for number in samples {
            var out: [UInt8] = [UInt8(ascii: "x")]
            CanonicalJSON.writeInteger(number, into: &out)
            #expect(out == Array("x\(number)".utf8), "\(number)")
            #expect(CanonicalJSON.encode(.int(number)) == Array(String(number).utf8))
        }
    }

    @Test("canonical form is a fixed point: parsing it and encoding again gives the same bytes")
    func fixedPoint() throws {
        let samples = [
            #"{"n":[1,2.5,-3e-9,1e300],"s":"\u0000x","o":{"z":{},"a":[]},"t":true,"f":false,"0":null}"#,
            #"[[[[]]],{"":""}]"#,
        ]
        for sample in samples {
            let once = try canonical(sample)
            #expect(try canonical(once) == once)
        }
    }

    @Test("invalid JSON and over-deep nesting are errors, not crashes")
    func invalid() {
        #expect(throws: JSONError.self) { try JSONValue.parse("{") }
        #expect(throws: JSONError.self) { try JSONValue.parse("{\"a\":}") }
        #expect(throws: JSONError.self) { try JSONValue.parse("") }
        let deep = String(repeating: "[", count: 600) + String(repeating: "]", count: 600)
        #expect(throws: JSONError.self) { try JSONValue.parse(deep) }
    }
}
