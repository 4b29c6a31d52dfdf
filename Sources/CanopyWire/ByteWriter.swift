/// Appends protocol fields to a growing byte array. Writing cannot fail: callers build messages
/// from values they validated, and lengths above a limit are programmer errors (`precondition`),
/// so an encoder never produces bytes a conforming decoder would refuse.
public struct ByteWriter: Sendable {
    /// The bytes written so far.
    public private(set) var bytes: [UInt8]

    /// An empty writer with room for `capacity` bytes.
    public init(capacity: Int = 64) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    /// Makes room for `count` more bytes, so a large message grows its buffer once.
    public mutating func reserve(additional count: Int) {
        bytes.reserveCapacity(bytes.count + count)
    }

    /// Appends one byte.
    public mutating func writeByte(_ byte: UInt8) {
        bytes.append(byte)
    }

    /// Appends raw bytes with no length prefix (fixed-size fields such as digests).
    public mutating func writeRaw(_ raw: some Collection<UInt8>) {
        bytes.append(contentsOf: raw)
    }

    /// Appends a u16 in big-endian order.
    public mutating func writeUInt16(_ value: UInt16) {
        bytes.append(UInt8(truncatingIfNeeded: value >> 8))
        bytes.append(UInt8(truncatingIfNeeded: value))
    }

    /// Appends an unsigned LEB128 varint: seven bits per byte, least significant group first, the
    /// high bit set on every byte but the last. Always the minimal encoding.
    public mutating func writeVarint(_ value: UInt64) {
        var rest = value
        while rest >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        bytes.append(UInt8(rest))
    }

    /// Appends `varint(count) ‖ bytes`. `maxBytes` is the field's limit; exceeding it is a bug.
    public mutating func writeLengthPrefixed(_ raw: some Collection<UInt8>, maxBytes: Int) {
        precondition(raw.count <= maxBytes, "field longer than its wire limit")
        writeVarint(UInt64(raw.count))
        bytes.append(contentsOf: raw)
    }

    /// Appends a UTF-8 string as `varint(byte count) ‖ bytes`.
    public mutating func writeString(_ text: String, maxBytes: Int) {
        writeLengthPrefixed(text.utf8, maxBytes: maxBytes)
    }
}
