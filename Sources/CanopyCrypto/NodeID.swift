/// A node's identity on the network: its 32-byte Ed25519 public key.
///
/// Text form (Protocol/replication-v1.md §3), chosen to match what Syncthing users already know:
///
///     key (32 bytes) ─base32, RFC 4648 alphabet, no padding→ 52 characters
///     52 characters  ─4 groups of 13, each followed by its check character→ 56 characters
///     56 characters  ─8 groups of 7 joined by "-"→ printed form (63 characters)
///
/// The check character of a group is a Luhn mod 32 over the group's base32 code points (see
/// `luhnCheck`). Parsing accepts upper and lower case, ignores dashes and spaces, and rejects a
/// wrong check character, so a mistyped id is caught before it is trusted.
///
/// Ordering is the byte-wise order of the public keys; `SimultaneousConnect` relies on it.
public struct NodeID: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The Ed25519 public key; always `publicKeyBytes` long.
    public let publicKey: [UInt8]

    /// Bytes of an Ed25519 public key.
    public static let publicKeyBytes = 32
    /// Base32 characters of a key without check characters.
    static let dataCharacters = 52
    /// Data characters covered by one check character.
    static let groupCharacters = 13
    /// Characters of the compact form: data plus one check character per group.
    public static let compactCharacters = 56
    /// Characters between dashes in the printed form.
    static let printGroupCharacters = 7

    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".utf8)

    /// Wraps a 32-byte public key. Returns nil for any other length.
    public init?(publicKey: some Collection<UInt8>) {
        guard publicKey.count == NodeID.publicKeyBytes else { return nil }
        self.publicKey = Array(publicKey)
    }

    /// Parses the text form. Case, dashes and spaces are ignored; everything else must be exact.
    public init(parsing text: some StringProtocol) throws(CryptoError) {
        var compact: [UInt8] = []
        compact.reserveCapacity(NodeID.compactCharacters)
        for character in text {
            if character == "-" || character == " " { continue }
            guard let ascii = character.asciiValue,
                let value = NodeID.codePoint(ascii)
            else { throw .nodeIDInvalidCharacter(character) }
            guard compact.count < NodeID.compactCharacters else {
                throw .nodeIDWrongLength(NodeID.countSignificant(text))
            }
            compact.append(value)
        }
        guard compact.count == NodeID.compactCharacters else { throw .nodeIDWrongLength(compact.count) }
        var data: [UInt8] = []
        data.reserveCapacity(NodeID.dataCharacters)
        for group in 0..<4 {
            let start = group * (NodeID.groupCharacters + 1)
            let digits = compact[start..<start + NodeID.groupCharacters]
            guard NodeID.luhnCheck(digits) == compact[start + NodeID.groupCharacters] else {
                throw .nodeIDWrongCheckCharacter(group: group)
            }
            data.append(contentsOf: digits)
        }
        self.publicKey = try NodeID.decodeBase32(data)
    }

    /// The compact form: 56 upper-case characters, no dashes.
    public var compactText: String {
        let data = NodeID.encodeBase32(publicKey)
        var out: [UInt8] = []
        out.reserveCapacity(NodeID.compactCharacters)
        for group in 0..<4 {
            let digits = data[group * NodeID.groupCharacters..<(group + 1) * NodeID.groupCharacters]
            out.append(contentsOf: digits.map { NodeID.alphabet[Int($0)] })
            out.append(NodeID.alphabet[Int(NodeID.luhnCheck(digits))])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The printed form: eight groups of seven characters joined by dashes.
    public var description: String {
        let compact = Array(compactText)
        return stride(from: 0, to: compact.count, by: NodeID.printGroupCharacters)
            .map { String(compact[$0..<$0 + NodeID.printGroupCharacters]) }
            .joined(separator: "-")
    }

    public static func < (lhs: NodeID, rhs: NodeID) -> Bool {
        lhs.publicKey.lexicographicallyPrecedes(rhs.publicKey)
    }

    /// Luhn mod 32 over base32 code points, as Syncthing computes it: factors alternate 1, 2
    /// starting at 1 from the left; each product contributes `p / 32 + p % 32`; the check code
    /// point makes the sum a multiple of 32.
    static func luhnCheck(_ digits: some Sequence<UInt8>) -> UInt8 {
        var factor = 1
        var sum = 0
        for digit in digits {
            let product = factor * Int(digit)
            sum += product / 32 + product % 32
            factor = factor == 1 ? 2 : 1
        }
        return UInt8((32 - sum % 32) % 32)
    }

    /// The base32 code point of an ASCII letter or digit (either case), or nil.
    static func codePoint(_ ascii: UInt8) -> UInt8? {
        switch ascii {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): ascii - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): ascii - UInt8(ascii: "a")
        case UInt8(ascii: "2")...UInt8(ascii: "7"): ascii - UInt8(ascii: "2") + 26
        default: nil
        }
    }

    /// Characters other than dashes and spaces, for an accurate length in the error.
    private static func countSignificant(_ text: some StringProtocol) -> Int {
        text.reduce(0) { $1 == "-" || $1 == " " ? $0 : $0 + 1 }
    }

    /// 32 bytes → 52 five-bit code points, most significant bits first, the last one zero-padded.
    static func encodeBase32(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(dataCharacters)
        var buffer = 0
        var bits = 0
        for byte in bytes {
            buffer = buffer << 8 | Int(byte)
            bits += 8
            while bits >= 5 {
                bits -= 5
                out.append(UInt8(buffer >> bits & 31))
            }
            buffer &= (1 << bits) - 1
        }
        if bits > 0 { out.append(UInt8(buffer << (5 - bits) & 31)) }
        return out
    }

    /// 52 code points → 32 bytes; the padding bits of the last code point must be zero, so every
    /// key has exactly one text form.
    static func decodeBase32(_ digits: [UInt8]) throws(CryptoError) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(publicKeyBytes)
        var buffer = 0
        var bits = 0
        for digit in digits {
            buffer = buffer << 5 | Int(digit)
            bits += 5
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(buffer >> bits & 255))
            }
            buffer &= (1 << bits) - 1
        }
        guard buffer == 0, out.count == publicKeyBytes else { throw .nodeIDNotCanonical }
        return out
    }
}
