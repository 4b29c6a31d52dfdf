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
    static func problem(in bytes: [UInt8]) -> String? {
        guard String(validating: bytes, as: UTF8.self) != nil else { return "not valid UTF-8" }
        return bytes.withUnsafeBufferPointer { buffer in
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
        case UInt8(ascii: "\""): _ = try string(decode: false)
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

    /// Scans an object, checking that keys ascend strictly by their decoded bytes.
    private mutating func object(depth: Int) throws(Failure) {
        try expect(UInt8(ascii: "{"))
        if peek == UInt8(ascii: "}") { index += 1; return }
        var previousKey: [UInt8]? = nil
        while true {
            let keyStart = index
            let key = try string()
            if let previousKey, !previousKey.lexicographicallyPrecedes(key) {
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

    /// Scans a string and returns its decoded UTF-8 bytes (used to order keys), or an empty
    /// array when `decode` is false (values need only the check, not the bytes).
    private mutating func string(decode: Bool = true) throws(Failure) -> [UInt8] {
        try expect(UInt8(ascii: "\""))
        var decoded: [UInt8] = []
        var runStart = index
        while index < bytes.count {
            let byte = bytes[index]
            // Plain bytes are the common case: skip them without per-byte work.
            if byte >= 0x20 && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\") {
                index += 1
                continue
            }
            if decode { decoded.append(contentsOf: bytes[runStart..<index]) }
            index += 1
            switch byte {
            case UInt8(ascii: "\""): return decoded
            case UInt8(ascii: "\\"):
                let escaped = try escape()
                if decode { decoded.append(escaped) }
            default: throw fail("unescaped control character")
            }
            runStart = index
        }
        throw fail("unterminated string")
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
