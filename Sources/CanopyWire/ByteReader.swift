/// Reads protocol fields from a complete message, front to back. Every read checks the bytes
/// that remain and every length against the caller's limit before copying, and reports a
/// `ProtocolError` naming the field; no input can make it trap or allocate more than the
/// remaining input.
public struct ByteReader: Sendable {
    private let bytes: ArraySlice<UInt8>
    /// The index of the next unread byte in `bytes`.
    private var position: Int

    /// A reader over `bytes`, starting at its first byte.
    public init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
        self.position = bytes.startIndex
    }

    /// A reader over a whole array.
    public init(_ bytes: [UInt8]) {
        self.init(bytes[...])
    }

    /// Bytes not yet read.
    public var remainingCount: Int { bytes.endIndex - position }

    /// True when every byte has been read.
    public var isAtEnd: Bool { position == bytes.endIndex }

    /// Reads one byte.
    public mutating func readByte(_ field: String) throws(ProtocolError) -> UInt8 {
        guard position < bytes.endIndex else { throw .truncated(field: field) }
        defer { position += 1 }
        return bytes[position]
    }

    /// Reads a big-endian u16.
    public mutating func readUInt16(_ field: String) throws(ProtocolError) -> UInt16 {
        let high = try readByte(field)
        let low = try readByte(field)
        return UInt16(high) << 8 | UInt16(low)
    }

    /// Reads 16 bytes as two big-endian u64 (a digest).
    mutating func readBigEndianPair(_ field: String) throws(ProtocolError) -> (UInt64, UInt64) {
        let offset = try advance(16, field)
        return bytes.withUnsafeBytes { raw in
            (UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self)),
             UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self)))
        }
    }

    /// Moves past `count` bytes, checking they are there; returns their offset from the start of
    /// `bytes`, for reads through an unsafe buffer (a sub-slice would retain and release the
    /// message's storage once per field).
    private mutating func advance(_ count: Int, _ field: String) throws(ProtocolError) -> Int {
        guard count >= 0, remainingCount >= count else { throw .truncated(field: field) }
        defer { position += count }
        return position - bytes.startIndex
    }

    /// Reads exactly `count` bytes (a fixed-size field, or a length already checked).
    public mutating func readRaw(_ count: Int, _ field: String) throws(ProtocolError) -> ArraySlice<UInt8> {
        let offset = try advance(count, field)
        return bytes[(bytes.startIndex + offset)..<(bytes.startIndex + offset + count)]
    }

    /// Reads an unsigned LEB128 varint of at most 64 bits. Refuses more than 10 bytes, bits
    /// beyond 64, and non-minimal encodings (a final zero byte after the first), so each value has
    /// exactly one encoding and vectors are byte-exact.
    public mutating func readVarint(_ field: String) throws(ProtocolError) -> UInt64 {
        switch readVarintValue() {
        case .value(let value): return value
        case .truncated: throw .truncated(field: field)
        case .malformed: throw .malformedVarint(field: field)
        }
    }

    /// The outcome of reading a varint, before any field name is attached (so the hot path never
    /// builds a string).
    private enum VarintRead {
        case value(UInt64), truncated, malformed
    }

    /// Decodes one varint at the read position (see `readVarint(_:)` for the rules).
    private mutating func readVarintValue() -> VarintRead {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        for index in 0..<10 {
            guard position < bytes.endIndex else { return .truncated }
            let byte = bytes[position]
            position += 1
            if index == 9, byte > 1 { return .malformed }
            value |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 {
                if byte == 0, index > 0 { return .malformed }
                return .value(value)
            }
            shift += 7
        }
        return .malformed
    }

    /// Reads the varint length of `field` and checks it lies in `range`; the error names
    /// "`field` length".
    private mutating func readLength(of field: String, in range: ClosedRange<Int>) throws(ProtocolError) -> Int {
        switch readVarintValue() {
        case .value(let value):
            guard value >= UInt64(range.lowerBound), value <= UInt64(range.upperBound) else {
                throw .outOfRange(field: field + " length", value: value, min: UInt64(range.lowerBound),
                                  max: UInt64(range.upperBound))
            }
            return Int(value)
        case .truncated: throw .truncated(field: field + " length")
        case .malformed: throw .malformedVarint(field: field + " length")
        }
    }

    /// Reads a varint and checks it lies in `range`, returning it as an `Int`.
    public mutating func readVarint(_ field: String, in range: ClosedRange<Int>) throws(ProtocolError) -> Int {
        let value = try readVarint(field)
        guard value >= UInt64(range.lowerBound), value <= UInt64(range.upperBound) else {
            throw .outOfRange(field: field, value: value, min: UInt64(range.lowerBound), max: UInt64(range.upperBound))
        }
        return Int(value)
    }

    /// Reads `varint(length) ‖ bytes`, checking the length against `range` before copying.
    public mutating func readLengthPrefixed(_ field: String, in range: ClosedRange<Int>) throws(ProtocolError) -> [UInt8] {
        let count = try readLength(of: field, in: range)
        let offset = try advance(count, field)
        return bytes.withUnsafeBufferPointer { Array(UnsafeBufferPointer(rebasing: $0[offset..<(offset + count)])) }
    }

    /// Reads a length-prefixed UTF-8 string whose byte count lies in `range`, refusing invalid UTF-8.
    public mutating func readString(_ field: String, in range: ClosedRange<Int>) throws(ProtocolError) -> String {
        let count = try readLength(of: field, in: range)
        let offset = try advance(count, field)
        let text = bytes.withUnsafeBufferPointer { Self.string(UnsafeBufferPointer(rebasing: $0[offset..<(offset + count)])) }
        guard let text else { throw .invalidUTF8(field: field) }
        return text
    }

    /// The string `utf8` spells, or nil when it is not valid UTF-8. ASCII — every document id in
    /// practice — is decoded without the general validation: `String(validating:as:)` is generic
    /// and looks up type metadata on every call (≈ 900 instructions for a short id, once per
    /// document of every `changes` batch), where an ASCII test and a decode cost a tenth of that.
    static func string(_ utf8: UnsafeBufferPointer<UInt8>) -> String? {
        guard let base = utf8.baseAddress else { return "" }
        var highBits: UInt64 = 0
        var offset = 0
        while offset + 8 <= utf8.count {
            highBits |= UnsafeRawPointer(base + offset).loadUnaligned(as: UInt64.self)
            offset += 8
        }
        while offset < utf8.count {
            highBits |= UInt64(base[offset])
            offset += 1
        }
        if highBits & 0x8080_8080_8080_8080 == 0 { return String(decoding: utf8, as: UTF8.self) }
        return String(validating: utf8, as: UTF8.self)
    }

    /// Throws unless every byte has been read; `messageType` names the message for the error.
    public func expectEnd(messageType: UInt8) throws(ProtocolError) {
        guard isAtEnd else { throw .trailingBytes(messageType: messageType, count: remainingCount) }
    }
}
