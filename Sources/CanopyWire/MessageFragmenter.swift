/// Splits an encoded message into frame plaintexts (§5.3). Each plaintext is
///
///     u8 flags ‖ fragment        flags bit 0 (`moreFragments`): another fragment follows
///
/// and the message is the concatenation of its fragments. Every fragment but the last is exactly
/// `fragmentBytesMax` long, so a message of n bytes takes ⌈n / fragmentBytesMax⌉ frames (one for
/// an empty message, which never occurs since a message has at least its type byte).
public enum MessageFragmenter {
    /// Fragment flag: more fragments of this message follow.
    public static let moreFragmentsFlag: UInt8 = 0x01
    /// Every other flag bit is reserved and must be zero.
    public static let reservedFlagsMask: UInt8 = 0xFE

    /// The frame plaintexts carrying `message`, encoded here. A message that fits one fragment
    /// (every message but an unusually large `revisions`) is encoded once, straight after its
    /// flags byte, and not copied again.
    public static func plaintexts(encoding message: Message, fragmentBytesMax: Int = WireLimits.fragmentBytesMax) -> [[UInt8]] {
        plaintexts(fragmentBytesMax: fragmentBytesMax) { message.encode(into: &$0) }
    }

    /// The frame plaintexts carrying a message of a version-2 connection, encoded as `encoding`
    /// does it (a `channel` writes its envelope and its session's message in place).
    package static func plaintexts(encoding message: ConnectionMessage, fragmentBytesMax: Int = WireLimits.fragmentBytesMax) -> [[UInt8]] {
        plaintexts(fragmentBytesMax: fragmentBytesMax) { message.encode(into: &$0) }
    }

    private static func plaintexts(fragmentBytesMax: Int, _ encode: (inout ByteWriter) -> Void) -> [[UInt8]] {
        var writer = ByteWriter(capacity: 64)
        writer.writeByte(0)  // the flags of a last (here: only) fragment
        encode(&writer)
        guard writer.bytes.count - 1 > fragmentBytesMax else { return [writer.bytes] }
        return plaintexts(of: Array(writer.bytes.dropFirst()), fragmentBytesMax: fragmentBytesMax)
    }

    /// The frame plaintexts carrying `message`. `fragmentBytesMax` may be lowered for tests.
    public static func plaintexts(of message: [UInt8], fragmentBytesMax: Int = WireLimits.fragmentBytesMax) -> [[UInt8]] {
        precondition((1...WireLimits.fragmentBytesMax).contains(fragmentBytesMax), "fragment size outside bounds")
        precondition(message.count <= WireLimits.messageBytesMax, "message longer than messageBytesMax")
        var plaintexts: [[UInt8]] = []
        plaintexts.reserveCapacity(max(1, (message.count + fragmentBytesMax - 1) / fragmentBytesMax))
        var start = 0
        repeat {
            let end = min(start + fragmentBytesMax, message.count)
            var plaintext: [UInt8] = []
            plaintext.reserveCapacity(1 + end - start)
            plaintext.append(end < message.count ? moreFragmentsFlag : 0)
            plaintext.append(contentsOf: message[start..<end])
            plaintexts.append(plaintext)
            start = end
        } while start < message.count
        return plaintexts
    }
}
