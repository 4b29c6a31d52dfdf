/// Canopy's canonical JSON form, the bytes that revision ids hash and that travel on the wire.
/// Normative text and vectors: `Protocol/canonical-json.md`.
///
/// - Objects: members sorted by the UTF-8 bytes of their keys; no insignificant whitespace.
/// - Strings: UTF-8, escaping only `"`, `\` and the control characters U+0000–U+001F
///   (`\b \t \n \f \r` in short form, the rest as `\u00xx` with lowercase hex).
/// - Numbers: an integer that fits in 64 bits (or a double with an integral value that does) is
///   written in decimal with no exponent, fraction or `-0`; every other number in the shortest form
///   that reads back as the same double, laid out as ECMAScript's `Number.prototype.toString` does
///   (the rule of RFC 8785, JSON Canonicalization Scheme).
public enum CanonicalJSON {
    /// The canonical bytes of `value`.
    public static func encode(_ value: JSONValue) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(value, into: &out)
        return out
    }

    /// Appends the canonical bytes of `value` to `out`.
    public static func write(_ value: JSONValue, into out: inout [UInt8]) {
        switch value {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let flag): out.append(contentsOf: (flag ? "true" : "false").utf8)
        case .int(let number): writeInteger(number, into: &out)
        case .double(let number): writeDouble(number, into: &out)
        case .string(let text): writeString(text, into: &out)
        case .array(let elements):
            out.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                write(element, into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            let sorted = members.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
            for (index, member) in sorted.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                writeString(member.key, into: &out)
                out.append(UInt8(ascii: ":"))
                write(member.value, into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    static func writeString(_ text: String, into out: inout [UInt8]) {
        var text = text
        // Contiguous UTF-8 (native Swift strings always are): copy runs of bytes that need no
        // escape in one append, and find them eight bytes at a time (a body's long texts).
        text.withUTF8 { bytes in
            out.append(UInt8(ascii: "\""))
            var runStart = 0
            var index = 0
            while index < bytes.count {
                if index + 8 <= bytes.count, let base = bytes.baseAddress,
                    !wordNeedsEscape(UInt64(littleEndian: UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self)))
                {
                    index += 8
                    continue
                }
                let byte = bytes[index]
                if byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                    if runStart < index { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index])) }
                    writeEscape(byte, into: &out)
                    runStart = index + 1
                }
                index += 1
            }
            if runStart < bytes.count { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...])) }
            out.append(UInt8(ascii: "\""))
        }
    }

    /// Whether any of the eight bytes of `word` needs an escape in a string: a control character
    /// (< 0x20), `"` or `\`. Bytes from 0x80 up (UTF-8 beyond ASCII) never do. The standard SWAR
    /// tests: `(x - 0x01…) & ~x & 0x80…` is non-zero exactly when a byte of `x` is zero, and with
    /// 0x20 in place of 0x01 exactly when a byte is below 0x20.
    @inlinable package static func wordNeedsEscape(_ word: UInt64) -> Bool {
        wordEscapeBits(word) & 0x8080_8080_8080_8080 != 0
    }

    /// `wordNeedsEscape` before its final mask: the high bit of a byte may be set where that byte
    /// needs an escape (and only the high bits mean anything), so a caller can fold in more tests.
    @inlinable @inline(__always) package static func wordEscapeBits(_ word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let control = (word &- ones &* 0x20) & ~word
        let quote = word ^ (ones &* UInt64(UInt8(ascii: "\"")))
        let backslash = word ^ (ones &* UInt64(UInt8(ascii: "\\")))
        return control | (quote &- ones) & ~quote | (backslash &- ones) & ~backslash
    }

    /// Appends the escape for a byte that needs one: `"`, `\\` or a control character.
    private static func writeEscape(_ byte: UInt8, into out: inout [UInt8]) {
        switch byte {
        case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
        case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
        case 0x08: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "b")])
        case 0x09: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
        case 0x0a: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
        case 0x0c: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "f")])
        case 0x0d: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
        default:
            out.append(contentsOf: "\\u00".utf8)
            out.append(Hex.digits[Int(byte >> 4)])
            out.append(Hex.digits[Int(byte & 0x0f)])
        }
    }

    /// Appends `number` in decimal, as `String(number)` spells it, without making the string
    /// (which goes through the generic `description`: ~250 instructions per number, and a list of
    /// keys for a SQL statement holds one per document).
    package static func writeInteger(_ number: Int64, into out: inout [UInt8]) {
        if number < 0 { out.append(UInt8(ascii: "-")) }
        var magnitude = number.magnitude
        // UInt64.max has 20 digits; they are produced last first, into the end of the buffer.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var start = digits.count
            repeat {
                start -= 1
                digits[start] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            out.append(contentsOf: UnsafeBufferPointer(rebasing: digits[start...]))
        }
    }

    static func writeDouble(_ number: Double, into out: inout [UInt8]) {
        precondition(number.isFinite, "JSON numbers are finite")
        if number.rounded(.towardZero) == number, abs(number) < 9.2e18 {
            writeInteger(Int64(number), into: &out)
            return
        }
        if number < 0 { out.append(UInt8(ascii: "-")) }
        let (digits, pointPosition) = shortestDigits(abs(number))
        let k = digits.count
        let n = pointPosition
        if k <= n && n <= 21 {
            out.append(contentsOf: digits)
            out.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: n - k))
        } else if 0 < n && n <= 21 {
            out.append(contentsOf: digits[..<n])
            out.append(UInt8(ascii: "."))
            out.append(contentsOf: digits[n...])
        } else if -6 < n && n <= 0 {
            out.append(contentsOf: "0.".utf8)
            out.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: -n))
            out.append(contentsOf: digits)
        } else {
            out.append(digits[0])
            if k > 1 {
                out.append(UInt8(ascii: "."))
                out.append(contentsOf: digits[1...])
            }
            out.append(UInt8(ascii: "e"))
            out.append(UInt8(ascii: n - 1 >= 0 ? "+" : "-"))
            out.append(contentsOf: String(abs(n - 1)).utf8)
        }
    }

    /// The shortest round-trip decimal digits of a positive finite double (no leading or trailing
    /// zeros) and the position of the decimal point: value = 0.digits × 10^pointPosition.
    /// Swift's `description` already prints the shortest round-trip digits; this only reads them.
    static func shortestDigits(_ number: Double) -> (digits: [UInt8], pointPosition: Int) {
        let text = Array(number.description.utf8)
        var mantissa = text[...]
        var exponent = 0
        if let e = text.firstIndex(where: { $0 == UInt8(ascii: "e") || $0 == UInt8(ascii: "E") }) {
            mantissa = text[..<e]
            exponent = Int(String(decoding: text[(e + 1)...], as: UTF8.self))!
        }
        var digits: [UInt8] = []
        var point = 0
        var seenPoint = false
        for byte in mantissa {
            if byte == UInt8(ascii: ".") { seenPoint = true; continue }
            digits.append(byte)
            if !seenPoint { point += 1 }
        }
        point += exponent
        while let first = digits.first, first == UInt8(ascii: "0"), digits.count > 1 {
            digits.removeFirst()
            point -= 1
        }
        while let last = digits.last, last == UInt8(ascii: "0"), digits.count > 1 { digits.removeLast() }
        return (digits, point)
    }
}
