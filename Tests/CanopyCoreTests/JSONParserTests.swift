import CanopyCore
import Foundation
import Testing

@Suite("JSON parsing refuses what it would otherwise change")
struct JSONParserTests {
    @Test("an object with two members of the same name is refused, naming the name")
    func duplicateNames() {
        #expect(throws: JSONError.duplicateKey("a")) { try JSONValue.parse(#"{"a":1,"a":2}"#) }
        #expect(throws: JSONError.duplicateKey("k")) { try JSONValue.parse(#"[{"x":{"k":1,"k":1}}]"#) }
        // Escapes are decoded before names are compared.
        #expect(throws: JSONError.duplicateKey("é")) { try JSONValue.parse(#"{"é":1,"\u00e9":2}"#) }
        #expect(JSONError.duplicateKey("a").description.contains(#""a""#))
    }

    @Test("a user's integer beyond 64 bits is refused when storing it would change its digits")
    func inexactIntegers() throws {
        #expect(throws: JSONError.inexactInteger("12345678901234567890", stored: "12345678901234567000")) {
            try JSONValue.parseInput(Data(#"{"n":12345678901234567890}"#.utf8))
        }
        #expect(throws: JSONError.self) { try JSONValue.parseInput(Data("-9223372036854775809".utf8)) }
        // Written as the double it is: kept (an export reads back in).
        #expect(try JSONValue.parseInput(Data("100000000000000000000".utf8)) == .double(1e20))
        #expect(try JSONValue.parseInput(Data("9223372036854775807".utf8)) == .int(.max))
        // Numbers with a fraction or exponent are doubles, as the spec says.
        #expect(try JSONValue.parseInput(Data("12345678901234567890.5".utf8)) == .double(12345678901234567890.5))
        // The spec's reading (vectors) is unchanged for `parse`.
        #expect(try JSONValue.parse("12345678901234567890") == .double(12345678901234567890))
        let message = JSONError.inexactInteger("12345678901234567890", stored: "12345678901234567000").description
        #expect(message.contains("12345678901234567890") && message.contains("string"))
    }

    @Test("a number beyond a double's range is refused with the number in the message")
    func outOfRange() {
        #expect(throws: JSONError.numberOutOfRange("1e400")) { try JSONValue.parse(#"{"x":1e400}"#) }
        #expect(throws: JSONError.numberOutOfRange("-1e400")) { try JSONValue.parse("-1e400") }
        #expect(JSONError.numberOutOfRange("1e400").description.hasPrefix("number 1e400 is out of range"))
    }

    @Test("the tolerant reading returns the value and the first problem")
    func tolerant() throws {
        let (value, problem) = try JSONValue.parseInputReportingProblem(Data(#"{"id":7,"b":{"a":1,"a":2},"n":1e400}"#.utf8))
        #expect(value.objectValue?["id"] == .int(7))
        #expect(problem == .duplicateKey("a"))
        #expect(throws: JSONError.self) { try JSONValue.parseInputReportingProblem(Data("{".utf8)) }
    }

    @Test("malformed text is refused with where it went wrong")
    func malformed() {
        for text in ["", "{", "[1,]", "{\"a\" 1}", "01", "1.", "-", "\"\u{01}\"", "\"\\x\"", "\"\\ud800\"", "tru", "[] x", "{\"a\":1,}"] {
            #expect(throws: JSONError.self, "\(text)") { try JSONValue.parse(text) }
        }
        #expect((try? JSONValue.parse(Data([0x22, 0xff, 0x22]))) == nil)
        #expect(throws: JSONError.tooDeep) { try JSONValue.parse(String(repeating: "[", count: 257) + String(repeating: "]", count: 257)) }
        #expect((try? JSONValue.parse(String(repeating: "[", count: 256) + String(repeating: "]", count: 256))) != nil)
    }

    @Test("strings, escapes and numbers read as the spec says")
    func values() throws {
        #expect(try JSONValue.parse(#" {"s":"a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"} "#) == .object(["s": .string("a\"\\/\u{8}\u{c}\n\r\té😀")]))
        #expect(try JSONValue.parse("[0,-0,1.5,-2e3,true,false,null]") == .array([.int(0), .int(0), .double(1.5), .double(-2000), .bool(true), .bool(false), .null]))
    }
}
