import CanopyCore
import Foundation

/// Reads the canonical JSON bodies the store wrote back into `JSONValue`s, in one pass over the
/// bytes. Why not `JSONValue.parse`: Foundation's decoder was 60% of the CPU time of a `get`.
///
/// It produces exactly what `JSONValue.parse` produces for the same bytes (an integer that fits
/// in 64 bits is `.int`, every other number `.double`). It only has to understand what
/// `CanonicalJSON` writes; on anything else (no whitespace is expected, for instance) it returns
/// nil and the caller falls back to `JSONValue.parse`, so it can never accept what the general
/// parser would refuse.
struct CanonicalJSONReader {
    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0

    /// The value of `bytes`, or nil when they are not canonical JSON this reader understands.
    static func parse(_ bytes: [UInt8]) -> JSONValue? {
        bytes.withUnsafeBufferPointer { buffer in
            var reader = CanonicalJSONReader(bytes: buffer)
            guard let value = reader.value(depth: 0), reader.index == buffer.count else { return nil }
            return value
        }
    }

    /// The top-level member `name` of the canonical object `bytes`: `.some(nil)` when the object
    /// has no such member, nil when the bytes are not canonical JSON this reader understands (the
    /// caller then parses them whole). Other members are stepped over, not built: a rule that
    /// looks at one field of a large body reads it without parsing the rest.
    static func member(_ name: String, of bytes: [UInt8]) -> JSONValue?? {
        bytes.withUnsafeBufferPointer { buffer in
            var reader = CanonicalJSONReader(bytes: buffer)
            return reader.member(name)
        }
    }

    private init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    private mutating func member(_ name: String) -> JSONValue?? {
        guard peek == UInt8(ascii: "{") else { return nil }
        index += 1
        if peek == UInt8(ascii: "}") { return .some(nil) }
        while true {
            guard peek == UInt8(ascii: "\""), let key = string(), peek == UInt8(ascii: ":") else { return nil }
            index += 1
            if key == name { return value(depth: 1).map { .some($0) } }
            guard skipValue(depth: 1) else { return nil }
            switch peek {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"): return .some(nil)
            default: return nil
            }
        }
    }

    /// Steps over one value without building it; false for anything unexpected.
    private mutating func skipValue(depth: Int) -> Bool {
        guard depth < StoreLimits.bodyDepthMax, let byte = peek else { return false }
        switch byte {
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            let close = byte == UInt8(ascii: "{") ? UInt8(ascii: "}") : UInt8(ascii: "]")
            index += 1
            if peek == close { index += 1; return true }
            while true {
                if byte == UInt8(ascii: "{") {
                    guard peek == UInt8(ascii: "\""), skipString(), peek == UInt8(ascii: ":") else { return false }
                    index += 1
                }
                guard skipValue(depth: depth + 1) else { return false }
                switch peek {
                case UInt8(ascii: ","): index += 1
                case close: index += 1; return true
                default: return false
                }
            }
        case UInt8(ascii: "\""): return skipString()
        default: return value(depth: depth) != nil
        }
    }

    /// Steps over a string, escapes included: `memchr` finds each quote, and a quote that an odd
    /// run of backslashes precedes is escaped (a body's long text is stepped over at memory speed).
    private mutating func skipString() -> Bool {
        index += 1
        guard let base = bytes.baseAddress else { return false }
        var from = index
        while from < bytes.count {
            guard let found = memchr(base + from, Int32(UInt8(ascii: "\"")), bytes.count - from) else { return false }
            let quote = from + (UnsafeRawPointer(base + from).distance(to: UnsafeRawPointer(found)))
            var backslashes = 0
            while quote - backslashes - 1 >= index, bytes[quote - backslashes - 1] == UInt8(ascii: "\\") { backslashes += 1 }
            if backslashes % 2 == 0 {
                index = quote + 1
                return true
            }
            from = quote + 1
        }
        return false
    }

    private var peek: UInt8? { index < bytes.count ? bytes[index] : nil }

    /// Reads one value at nesting `depth`; nil for anything unexpected.
    private mutating func value(depth: Int) -> JSONValue? {
        guard depth < StoreLimits.bodyDepthMax, let byte = peek else { return nil }
        switch byte {
        case UInt8(ascii: "{"): return object(depth: depth + 1)
        case UInt8(ascii: "["): return array(depth: depth + 1)
        case UInt8(ascii: "\""): return string().map { .string($0) }
        case UInt8(ascii: "t"): return literal("true", .bool(true))
        case UInt8(ascii: "f"): return literal("false", .bool(false))
        case UInt8(ascii: "n"): return literal("null", .null)
        default: return number()
        }
    }

    private mutating func literal(_ word: StaticString, _ value: JSONValue) -> JSONValue? {
        let count = word.utf8CodeUnitCount
        guard index + count <= bytes.count,
            bytes[index..<(index + count)].elementsEqual(UnsafeBufferPointer(start: word.utf8Start, count: count))
        else { return nil }
        index += count
        return value
    }

    /// Reads an object (keys as written; canonical bytes hold no duplicates).
    private mutating func object(depth: Int) -> JSONValue? {
        index += 1
        var members: [String: JSONValue] = [:]
        if peek == UInt8(ascii: "}") { index += 1; return .object(members) }
        while true {
            guard peek == UInt8(ascii: "\""), let key = string(), peek == UInt8(ascii: ":") else { return nil }
            index += 1
            guard let member = value(depth: depth) else { return nil }
            members[key] = member
            switch peek {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"): index += 1; return .object(members)
            default: return nil
            }
        }
    }

    /// Reads an array.
    private mutating func array(depth: Int) -> JSONValue? {
        index += 1
        var elements: [JSONValue] = []
        if peek == UInt8(ascii: "]") { index += 1; return .array(elements) }
        while true {
            guard let element = value(depth: depth) else { return nil }
            elements.append(element)
            switch peek {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "]"): index += 1; return .array(elements)
            default: return nil
            }
        }
    }

    /// A string; the bytes between escapes are copied in runs.
    private mutating func string() -> String? {
        index += 1
        let start = index
        while index < bytes.count, bytes[index] != UInt8(ascii: "\""), bytes[index] != UInt8(ascii: "\\") { index += 1 }
        guard index < bytes.count else { return nil }
        if bytes[index] == UInt8(ascii: "\"") {
            defer { index += 1 }
            return String(decoding: bytes[start..<index], as: UTF8.self)
        }
        var decoded = Array(bytes[start..<index])
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""): return String(decoding: decoded, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard let escaped = escape() else { return nil }
                decoded.append(escaped)
            default: decoded.append(byte)
            }
        }
        return nil
    }

    /// The byte an escape stands for; canonical form escapes only ASCII control characters,
    /// `"` and `\`.
    private mutating func escape() -> UInt8? {
        guard let byte = peek else { return nil }
        index += 1
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): return byte
        case UInt8(ascii: "b"): return 0x08
        case UInt8(ascii: "t"): return 0x09
        case UInt8(ascii: "n"): return 0x0a
        case UInt8(ascii: "f"): return 0x0c
        case UInt8(ascii: "r"): return 0x0d
        case UInt8(ascii: "u"):
            guard index + 4 <= bytes.count, bytes[index] == UInt8(ascii: "0"), bytes[index + 1] == UInt8(ascii: "0"),
                let high = Self.hex(bytes[index + 2]), let low = Self.hex(bytes[index + 3]), high < 8
            else { return nil }
            index += 4
            return high << 4 | low
        default: return nil
        }
    }

    private static func hex(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// A number: `.int` when the token is an integer that fits in 64 bits (as `JSONValue.parse`
    /// decides), else `.double`.
    private mutating func number() -> JSONValue? {
        let start = index
        var integral = true
        scan: while let byte = peek {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"): index += 1
            case UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E"), UInt8(ascii: "+"):
                integral = false
                index += 1
            default: break scan
            }
        }
        guard index > start else { return nil }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        if integral, let integer = Int64(text) { return .int(integer) }
        guard let double = Double(text), double.isFinite else { return nil }
        // Only JSON's number syntax: the general parser decides anything unusual.
        guard CanonicalJSON.encode(.double(double)).elementsEqual(bytes[start..<index]) else { return nil }
        return .double(double)
    }
}
