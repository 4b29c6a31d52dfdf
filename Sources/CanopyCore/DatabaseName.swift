/// The name of one of a node's databases, checked against CouchDB's rule: a lowercase ASCII
/// letter, then lowercase letters, digits and `_ $ ( ) + / -`, at most 238 bytes in all
/// (`^[a-z][a-z0-9_$()+/-]*$`). `default` is the database every command uses unless told
/// otherwise; a data directory always has it.
///
/// The same rule holds wherever a name is read: the command line, the admin socket, the config
/// file and the replication protocol.
public struct DatabaseName: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The name's text, valid by construction.
    public let text: String

    /// The longest name, in bytes (CouchDB's limit).
    public static let bytesMax = 238
    /// The database every existing command and peer uses unless told otherwise.
    public static let `default` = DatabaseName(checked: "default")

    /// The name, or nil when `text` breaks the rule.
    public init?(validating text: some StringProtocol) {
        guard Self.problem(with: text) == nil else { return nil }
        self.text = String(text)
    }

    private init(checked text: String) { self.text = text }

    /// The sentence that refuses `text` as a database name, naming the rule it breaks (for the
    /// command line, the admin socket, the config file and the library alike).
    public static func refusal(of text: some StringProtocol) -> String {
        "\"\(text.prefix(80))\" is not a database name: \(problem(with: text) ?? "")"
    }

    /// Why `text` is not a database name, in words fit for a message; nil when it is one.
    public static func problem(with text: some StringProtocol) -> String? {
        let bytes = Array(text.utf8)
        guard let first = bytes.first else { return "a database name may not be empty" }
        guard bytes.count <= bytesMax else {
            return "a database name has at most \(bytesMax) bytes (this one has \(bytes.count))"
        }
        guard first >= UInt8(ascii: "a") && first <= UInt8(ascii: "z") else {
            return "a database name starts with a lowercase letter a-z"
        }
        guard bytes.allSatisfy(isAllowed) else {
            return "a database name holds only lowercase letters a-z, digits 0-9 and _ $ ( ) + / -"
        }
        return nil
    }

    private static func isAllowed(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"): return true
        default: return Array("_$()+/-".utf8).contains(byte)
        }
    }

    public var description: String { text }

    public static func < (lhs: DatabaseName, rhs: DatabaseName) -> Bool { lhs.text < rhs.text }
}
