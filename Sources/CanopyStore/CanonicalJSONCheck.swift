import CanopyCore

/// Checks, without building a `JSONValue`, that bytes are a JSON object in Canopy's canonical form
/// (`Protocol/canonical-json.md`): no whitespace, members sorted strictly by the UTF-8 bytes of
/// their keys, strings with only the minimal escapes, numbers in their canonical spelling, valid
/// UTF-8, nesting at most `StoreLimits.bodyDepthMax` deep.
///
/// Why: replication receives bodies as canonical bytes and must verify each revision id against
/// them. Hashing the received bytes directly is only sound if they are the one canonical spelling
/// of their content; checking that with a single pass is several times cheaper than parsing and
/// re-encoding, and this is the replication hot path.
///
/// Limitation: keys are compared as bytes, so two keys that differ only by Unicode normalisation
/// pass here although `JSONValue` would treat them as one key. Such bytes can only come from a
/// peer that does not encode through `CanonicalJSON`.
struct CanonicalJSONCheck {
    /// The bytes being checked (a buffer, not an array: no bounds-check or reference-count
    /// traffic in the scanning loops, which are the replication hot path).
    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0

    /// Returns nil when `bytes` are a canonical JSON object, else what is wrong.
    ///
    /// UTF-8 is validated during the scan, not in a separate pass: outside strings the grammar
    /// admits only ASCII, and inside strings every non-ASCII sequence is checked where it starts.
    static func problem(in bytes: [UInt8]) -> String? {
        bytes.withUnsafeBufferPointer { buffer in
            var check = CanonicalJSONCheck(bytes: buffer)
            guard check.peek == UInt8(ascii: "{") else { return "not an object" }
            do throws(Failure) {
                try check.value(depth: 0)
                guard check.index == buffer.count else { throw Failure(offset: check.index, what: "trailing bytes") }
                return nil
            } catch {
                return "\(error.what) at byte \(error.offset)"
            }
        }
    }

    /// Where the scan stopped and why.
    private struct Failure: Error {
        let offset: Int
        let what: String
    }

    private var peek: UInt8? { index < bytes.count ? bytes[index] : nil }

    private func fail(_ what: String) -> Failure { Failure(offset: index, what: what) }

    private mutating func expect(_ byte: UInt8) throws(Failure) {
        guard peek == byte else { throw fail("expected \"\(Character(Unicode.Scalar(byte)))\"") }
        index += 1
    }

    /// Scans one value of any type at nesting `depth`.
    private mutating func value(depth: Int) throws(Failure) {
        guard depth < StoreLimits.bodyDepthMax else { throw fail("nested too deep") }
        switch peek {
        case UInt8(ascii: "{"): try object(depth: depth + 1)
        case UInt8(ascii: "["): try array(depth: depth + 1)
        case UInt8(ascii: "\""): _ = try string(decodingKey: false)
        case UInt8(ascii: "t"): try literal("true")
        case UInt8(ascii: "f"): try literal("false")
        case UInt8(ascii: "n"): try literal("null")
        case .some(let byte) where byte == UInt8(ascii: "-") || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte):
            try number()
        default: throw fail("expected a value")
        }
    }

    private mutating func literal(_ word: StaticString) throws(Failure) {
        let count = word.utf8CodeUnitCount
        guard index + count <= bytes.count,
            bytes[index..<(index + count)].elementsEqual(UnsafeBufferPointer(start: word.utf8Start, count: count))
        else { throw fail("expected \(word)") }
        index += count
    }

    /// A key as scanned: its bytes in the buffer when it has no escape (the common case, no
    /// copy), else its decoded bytes.
    private enum Key {
        case raw(Range<Int>)
        case decoded([UInt8])
    }

    /// Whether key `a` sorts strictly before key `b` by their decoded UTF-8 bytes.
    private func precedes(_ a: Key, _ b: Key) -> Bool {
        switch (a, b) {
        case (.raw(let x), .raw(let y)): return bytes[x].lexicographicallyPrecedes(bytes[y])
        case (.raw(let x), .decoded(let y)): return bytes[x].lexicographicallyPrecedes(y)
        case (.decoded(let x), .raw(let y)): return x.lexicographicallyPrecedes(bytes[y])
        case (.decoded(let x), .decoded(let y)): return x.lexicographicallyPrecedes(y)
        }
    }

    /// Scans an object, checking that keys ascend strictly by their decoded bytes.
    private mutating func object(depth: Int) throws(Failure) {
        try expect(UInt8(ascii: "{"))
        if peek == UInt8(ascii: "}") { index += 1; return }
        var previousKey: Key? = nil
        while true {
            let keyStart = index
            let key = try string(decodingKey: true)
            if let previousKey, !precedes(previousKey, key) {
                throw Failure(offset: keyStart, what: "keys not in strictly ascending byte order")
            }
            previousKey = key
            try expect(UInt8(ascii: ":"))
            try value(depth: depth)
            if peek == UInt8(ascii: ",") { index += 1; continue }
            try expect(UInt8(ascii: "}"))
            return
        }
    }

    /// Scans an array.
    private mutating func array(depth: Int) throws(Failure) {
        try expect(UInt8(ascii: "["))
        if peek == UInt8(ascii: "]") { index += 1; return }
        while true {
            try value(depth: depth)
            if peek == UInt8(ascii: ",") { index += 1; continue }
            try expect(UInt8(ascii: "]"))
            return
        }
    }

    /// Scans a string. For a key (`decodingKey`), returns it for ordering: in place when it has
    /// no escape, decoded when it has one; for a value the result is not used.
    private mutating func string(decodingKey: Bool) throws(Failure) -> Key {
        try expect(UInt8(ascii: "\""))
        let start = index
        var decoded: [UInt8]? = nil
        var runStart = index
        while true {
            skipPlainBytes()
            guard index < bytes.count else { throw fail("unterminated string") }
            let byte = bytes[index]
            if byte >= 0x80 {
                try utf8Sequence()
            } else if byte == UInt8(ascii: "\"") {
                let end = index
                index += 1
                guard var key = decoded else { return .raw(start..<end) }
                key.append(contentsOf: bytes[runStart..<end])
                return .decoded(key)
            } else if byte == UInt8(ascii: "\\") {
                if decodingKey { decoded = (decoded ?? []) + bytes[runStart..<index] }
                index += 1
                let escaped = try escape()
                decoded?.append(escaped)
                runStart = index
            } else {
                throw fail("unescaped control character")
            }
        }
    }

    /// Advances past bytes a string holds as they are: printable ASCII other than `"` and `\`.
    /// Sixteen bytes at a time with vector compares while none needs a look (the long text of a
    /// body is mostly such bytes), then eight at a time to find the first that does: in the first
    /// word with a byte that needs a look, the lowest flagged byte is the first such byte (the
    /// SWAR tests can only flag a byte wrongly above one they flag rightly), so the scan stops
    /// there without going back over the word; fewer than eight bytes at the end go one by one.
    private mutating func skipPlainBytes() {
        let count = bytes.count
        if let base = bytes.baseAddress {
            // Written so that the compiler emits one signed compare for control and non-ASCII
            // bytes, two for `"` and `\`, and a movemask (checked in the disassembly; scalar
            // operands compare lane by lane, and `.< 0x20 .| .>= 0x80` reduces without movemask).
            let space = SIMD16<UInt8>(repeating: 0x20)
            let printableCount = SIMD16<UInt8>(repeating: 0x60)
            let quote = SIMD16<UInt8>(repeating: UInt8(ascii: "\""))
            let backslash = SIMD16<UInt8>(repeating: UInt8(ascii: "\\"))
            while index + 16 <= count {
                let block = UnsafeRawPointer(base + index).loadUnaligned(as: SIMD16<UInt8>.self)
                let look = ((block &- space) .>= printableCount) .| (block .== quote) .| (block .== backslash)
                if any(look) { break }
                index += 16
            }
            while index + 8 <= count {
                let word = UInt64(littleEndian: UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self))
                let look = Self.lookBits(word)
                if look != 0 {
                    index += look.trailingZeroBitCount >> 3
                    return
                }
                index += 8
            }
        }
        while index < count {
            let byte = bytes[index]
            if byte < 0x20 || byte >= 0x80 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { return }
            index += 1
        }
    }

    /// The high bit of each byte of `word` (read little-endian) that may be one a canonical string
    /// escapes, or non-ASCII (whose UTF-8 the scan must validate); zero when none is.
    @inline(__always) private static func lookBits(_ word: UInt64) -> UInt64 {
        (word | CanonicalJSON.wordEscapeBits(word)) & 0x8080_8080_8080_8080
    }

    /// Checks the multi-byte UTF-8 sequence starting at `index` and moves past it: a well-formed
    /// sequence as the Unicode Standard's table 3-7 lists them (no overlong forms, no surrogates,
    /// nothing above U+10FFFF).
    private mutating func utf8Sequence() throws(Failure) {
        let length: Int
        let second: ClosedRange<UInt8>
        switch bytes[index] {
        case 0xC2...0xDF: (length, second) = (2, 0x80...0xBF)
        case 0xE0: (length, second) = (3, 0xA0...0xBF)
        case 0xE1...0xEC, 0xEE...0xEF: (length, second) = (3, 0x80...0xBF)
        case 0xED: (length, second) = (3, 0x80...0x9F)
        case 0xF0: (length, second) = (4, 0x90...0xBF)
        case 0xF1...0xF3: (length, second) = (4, 0x80...0xBF)
        case 0xF4: (length, second) = (4, 0x80...0x8F)
        default: throw fail("not valid UTF-8")
        }
        guard index + length <= bytes.count, second.contains(bytes[index + 1]) else { throw fail("not valid UTF-8") }
        for offset in 2..<length where !(0x80...0xBF).contains(bytes[index + offset]) {
            throw fail("not valid UTF-8")
        }
        index += length
    }

    /// Scans the escape after a backslash; only the escapes canonical form writes are accepted.
    private mutating func escape() throws(Failure) -> UInt8 {
        guard let byte = peek else { throw fail("unterminated escape") }
        index += 1
        switch byte {
        case UInt8(ascii: "\""): return byte
        case UInt8(ascii: "\\"): return byte
        case UInt8(ascii: "b"): return 0x08
        case UInt8(ascii: "t"): return 0x09
        case UInt8(ascii: "n"): return 0x0a
        case UInt8(ascii: "f"): return 0x0c
        case UInt8(ascii: "r"): return 0x0d
        case UInt8(ascii: "u"):
            guard index + 4 <= bytes.count, bytes[index] == UInt8(ascii: "0"), bytes[index + 1] == UInt8(ascii: "0"),
                let high = Self.lowerHex(bytes[index + 2]), let low = Self.lowerHex(bytes[index + 3]), high < 2
            else { throw fail("\\u escape of a character that needs none") }
            let scalar = high << 4 | low
            guard ![0x08, 0x09, 0x0a, 0x0c, 0x0d].contains(scalar) else { throw fail("long escape of a short-escape character") }
            index += 4
            return scalar
        default: throw fail("escape canonical form does not use")
        }
    }

    private static func lowerHex(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        default: return nil
        }
    }

    /// Scans a number and checks it is spelled as `CanonicalJSON` writes the value it denotes.
    private mutating func number() throws(Failure) {
        let start = index
        let isNumberByte: (UInt8) -> Bool = { byte in
            (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-")
                || byte == UInt8(ascii: "+") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "e")
                || byte == UInt8(ascii: "E")
        }
        while let byte = peek, isNumberByte(byte) { index += 1 }
        let token = bytes[start..<index]
        if Self.isCanonicalSmallInteger(token) { return }
        let text = String(decoding: token, as: UTF8.self)
        let canonical: [UInt8]
        if let integer = Int64(text) {
            canonical = CanonicalJSON.encode(.int(integer))
        } else if let double = Double(text), double.isFinite {
            canonical = CanonicalJSON.encode(.double(double))
        } else {
            throw Failure(offset: start, what: "invalid number")
        }
        // Comparing with the canonical spelling also rejects every non-JSON form `Double` accepts.
        guard token.elementsEqual(canonical) else { throw Failure(offset: start, what: "number not in canonical form") }
    }

    /// Fast path for the common case: an integer of at most 18 digits (so it fits in 64 bits) is
    /// canonical when it has no leading zero and is not "-0".
    private static func isCanonicalSmallInteger(_ token: Slice<UnsafeBufferPointer<UInt8>>) -> Bool {
        let digits = token.first == UInt8(ascii: "-") ? token.dropFirst() : token
        guard let first = digits.first, digits.count <= 18,
            digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) })
        else { return false }
        return first != UInt8(ascii: "0") || (digits.count == 1 && digits.count == token.count)
    }
}
