/// Parses JSON text (RFC 8259) into a `JSONValue`, refusing what `Protocol/canonical-json.md` §1
/// refuses instead of guessing: an object with two members of the same name (which one to keep
/// is not defined, and keeping either silently changes the data), a number beyond a double's
/// range, nesting deeper than `JSONValue.depthMax`.
///
/// Why not Foundation's `JSONDecoder`: it keeps one of two duplicate members without a word and
/// reports `1e400` as a type mismatch, so a user saw neither what went wrong nor where.
struct JSONParser {
    private let bytes: UnsafeBufferPointer<UInt8>
    private let exactIntegers: Bool
    private let tolerant: Bool
    private var index = 0
    /// The first refused content met in tolerant mode.
    private var problem: JSONError?

    /// Parses all of `bytes` as one JSON value. With `exactIntegers`, an integer written without
    /// fraction or exponent that does not fit in 64 bits is refused unless its double reads back
    /// as the same text (see `JSONValue.parseInput`). With `tolerant`, refused content that is
    /// still well-formed JSON (a duplicate name, an out-of-range or inexact number) does not stop
    /// the parse: the first such problem is returned beside the value (the later duplicate kept,
    /// an out-of-range number read as null), so a caller can still read what it needs to report
    /// the problem, such as a request's id.
    static func parse(
        _ bytes: UnsafeBufferPointer<UInt8>, exactIntegers: Bool, tolerant: Bool = false
    ) throws(JSONError) -> (value: JSONValue, problem: JSONError?) {
        var parser = JSONParser(bytes: bytes, exactIntegers: exactIntegers, tolerant: tolerant)
        parser.skipWhitespace()
        let value = try parser.value(depth: 0)
        parser.skipWhitespace()
        guard parser.index == bytes.count else { throw parser.unexpected("after the value") }
        return (value, parser.problem)
    }

    private init(bytes: UnsafeBufferPointer<UInt8>, exactIntegers: Bool, tolerant: Bool) {
        self.bytes = bytes
        self.exactIntegers = exactIntegers
        self.tolerant = tolerant
    }

    /// Throws `error`, or in tolerant mode records it (the first one) and carries on.
    private mutating func refuse(_ error: JSONError) throws(JSONError) {
        guard tolerant else { throw error }
        if problem == nil { problem = error }
    }

    private var peek: UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func skipWhitespace() {
        while let byte = peek, byte == 0x20 || byte == 0x0a || byte == 0x0d || byte == 0x09 { index += 1 }
    }

    /// The error for the byte at `index` (or the end of the text).
    private func unexpected(_ context: String) -> JSONError {
        guard let byte = peek else { return .invalidJSON(detail: "the text ends too early (\(context))") }
        let shown = byte >= 0x20 && byte < 0x7f ? "'\(Character(Unicode.Scalar(byte)))'" : "byte 0x\(String(byte, radix: 16))"
        return .invalidJSON(detail: "unexpected \(shown) at byte \(index) (\(context))")
    }

    /// One value; `depth` counts the arrays and objects around it.
    private mutating func value(depth: Int) throws(JSONError) -> JSONValue {
        guard let byte = peek else { throw unexpected("a value was expected") }
        switch byte {
        case UInt8(ascii: "{"):
            guard depth < JSONValue.depthMax else { throw .tooDeep }
            return try object(depth: depth + 1)
        case UInt8(ascii: "["):
            guard depth < JSONValue.depthMax else { throw .tooDeep }
            return try array(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): return try literal("true", .bool(true))
        case UInt8(ascii: "f"): return try literal("false", .bool(false))
        case UInt8(ascii: "n"): return try literal("null", .null)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw unexpected("a value was expected")
        }
    }

    private mutating func literal(_ word: String, _ value: JSONValue) throws(JSONError) -> JSONValue {
        for expected in word.utf8 {
            guard peek == expected else { throw unexpected("\(word) was expected") }
            index += 1
        }
        return value
    }

    private mutating func object(depth: Int) throws(JSONError) -> JSONValue {
        index += 1
        var members: [String: JSONValue] = [:]
        skipWhitespace()
        if peek == UInt8(ascii: "}") { index += 1; return .object(members) }
        while true {
            skipWhitespace()
            guard peek == UInt8(ascii: "\"") else { throw unexpected("a member name in quotes was expected") }
            let key = try string()
            skipWhitespace()
            guard peek == UInt8(ascii: ":") else { throw unexpected("':' was expected after a member name") }
            index += 1
            skipWhitespace()
            let member = try value(depth: depth)
            if members.updateValue(member, forKey: key) != nil { try refuse(.duplicateKey(key)) }
            skipWhitespace()
            switch peek {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"): index += 1; return .object(members)
            default: throw unexpected("',' or '}' was expected in an object")
            }
        }
    }

    private mutating func array(depth: Int) throws(JSONError) -> JSONValue {
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if peek == UInt8(ascii: "]") { index += 1; return .array(elements) }
        while true {
            skipWhitespace()
            elements.append(try value(depth: depth))
            skipWhitespace()
            switch peek {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "]"): index += 1; return .array(elements)
            default: throw unexpected("',' or ']' was expected in an array")
            }
        }
    }

    /// A string, escapes decoded; the text must be valid UTF-8 without raw control characters.
    private mutating func string() throws(JSONError) -> String {
        index += 1
        var decoded: [UInt8] = []
        var runStart = index
        while true {
            guard let byte = peek else { throw unexpected("a string is not closed") }
            switch byte {
            case UInt8(ascii: "\""):
                decoded.append(contentsOf: bytes[runStart..<index])
                index += 1
                guard let text = String(validating: decoded, as: UTF8.self) else {
                    throw .invalidJSON(detail: "a string is not valid UTF-8 (before byte \(index))")
                }
                return text
            case UInt8(ascii: "\\"):
                decoded.append(contentsOf: bytes[runStart..<index])
                index += 1
                try escape(into: &decoded)
                runStart = index
            case 0..<0x20:
                throw unexpected("a control character must be escaped in a string")
            default:
                index += 1
            }
        }
    }

    /// Decodes the escape after a backslash, appending its UTF-8 bytes.
    private mutating func escape(into decoded: inout [UInt8]) throws(JSONError) {
        guard let byte = peek else { throw unexpected("an escape is not finished") }
        index += 1
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): decoded.append(byte)
        case UInt8(ascii: "b"): decoded.append(0x08)
        case UInt8(ascii: "f"): decoded.append(0x0c)
        case UInt8(ascii: "n"): decoded.append(0x0a)
        case UInt8(ascii: "r"): decoded.append(0x0d)
        case UInt8(ascii: "t"): decoded.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = try hex4()
            if (0xd800..<0xdc00).contains(scalar) {
                guard peek == UInt8(ascii: "\\"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "u") else {
                    throw .invalidJSON(detail: "a \\u escape at byte \(index - 6) is half of a surrogate pair")
                }
                index += 2
                let low = try hex4()
                guard (0xdc00..<0xe000).contains(low) else {
                    throw .invalidJSON(detail: "a \\u escape at byte \(index - 12) is half of a surrogate pair")
                }
                scalar = 0x10000 + ((scalar - 0xd800) << 10) + (low - 0xdc00)
            } else if (0xdc00..<0xe000).contains(scalar) {
                throw .invalidJSON(detail: "a \\u escape at byte \(index - 6) is half of a surrogate pair")
            }
            decoded.append(contentsOf: Array(String(Character(Unicode.Scalar(scalar)!)).utf8))
        default:
            index -= 1
            throw unexpected("not a JSON escape")
        }
    }

    private mutating func hex4() throws(JSONError) -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let byte = peek else { throw unexpected("\\u needs four hex digits") }
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw unexpected("\\u needs four hex digits")
            }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    /// A number: `.int` when written as an integer that fits in 64 bits, else `.double`.
    private mutating func number() throws(JSONError) -> JSONValue {
        let start = index
        if peek == UInt8(ascii: "-") { index += 1 }
        if peek == UInt8(ascii: "0") {
            index += 1
        } else {
            guard digits() > 0 else { throw unexpected("a digit was expected in a number") }
        }
        var integral = true
        if peek == UInt8(ascii: ".") {
            integral = false
            index += 1
            guard digits() > 0 else { throw unexpected("a digit was expected after '.'") }
        }
        if peek == UInt8(ascii: "e") || peek == UInt8(ascii: "E") {
            integral = false
            index += 1
            if peek == UInt8(ascii: "+") || peek == UInt8(ascii: "-") { index += 1 }
            guard digits() > 0 else { throw unexpected("a digit was expected in an exponent") }
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        if integral, let integer = Int64(text) { return .int(integer) }
        guard let double = Double(text), double.isFinite else {
            try refuse(.numberOutOfRange(text))
            return .null
        }
        if integral, exactIntegers {
            let stored = String(decoding: CanonicalJSON.encode(.double(double)), as: UTF8.self)
            if stored != text { try refuse(.inexactInteger(text, stored: stored)) }
        }
        return .double(double)
    }

    private mutating func digits() -> Int {
        let start = index
        while let byte = peek, byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") { index += 1 }
        return index - start
    }
}
