import Foundation

/// A JSON value as Canopy keeps it: integers that fit in 64 bits stay exact, every other number is
/// an IEEE double. Object keys are compared as Swift strings (canonically equivalent keys are the
/// same key); the canonical form sorts them by their UTF-8 bytes.
public enum JSONValue: Hashable, Sendable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// The members of an object, or nil.
    public var objectValue: [String: JSONValue]? {
        if case .object(let members) = self { return members }
        return nil
    }

    /// An empty object, the body of a deletion unless one is given.
    public static let emptyObject = JSONValue.object([:])
}

/// Errors from parsing JSON text. Each description names what is wrong in the user's words.
public enum JSONError: Error, Equatable, CustomStringConvertible {
    /// The bytes are not JSON; `detail` says where or why.
    case invalidJSON(detail: String)
    /// A number that JSON can write but a double cannot hold (`1e400`).
    case numberOutOfRange(String)
    /// Nesting deeper than `JSONValue.depthMax`.
    case tooDeep
    /// An object has two members with this name (`Protocol/canonical-json.md` §1).
    case duplicateKey(String)
    /// An integer beyond 64 bits that would be stored as a double written differently (`stored`):
    /// refused where the text is a user's input (`JSONValue.parseInput`).
    case inexactInteger(String, stored: String)

    public var description: String {
        switch self {
        case .invalidJSON(let detail): return "invalid JSON: \(detail)"
        case .numberOutOfRange(let text):
            return "number \(text.prefix(40)) is out of range (a JSON number must fit in a double, at most about 1.8e308)"
        case .tooDeep: return "JSON nested deeper than \(JSONValue.depthMax) levels"
        case .duplicateKey(let key):
            return "duplicate member name \"\(key.prefix(80))\" in a JSON object; give each member once"
        case .inexactInteger(let text, let stored):
            return "integer \(text.prefix(40)) cannot be stored exactly: integers beyond ±9223372036854775807 are kept as doubles, "
                + "which would change it to \(stored.prefix(40)); write it as a string to keep every digit"
        }
    }
}

extension JSONValue {
    /// The deepest nesting of arrays and objects accepted.
    public static let depthMax = 256

    /// Parses JSON text (any value, not only objects) as the canonical JSON spec reads it: an
    /// integer beyond 64 bits becomes the nearest double; duplicate member names are refused.
    public static func parse(_ data: some DataProtocol) throws(JSONError) -> JSONValue {
        try parse(Array(data), exactIntegers: false)
    }

    /// Parses JSON text from a string.
    public static func parse(_ text: String) throws(JSONError) -> JSONValue {
        try parse(Array(text.utf8), exactIntegers: false)
    }

    /// Parses JSON text a user wrote (a document body, an import, an admin request): as `parse`,
    /// and an integer beyond 64 bits is refused unless it is written exactly as the double it
    /// becomes (`12345678901234567890` is refused, `100000000000000000000` kept), so a write never
    /// changes a number's digits without a word.
    public static func parseInput(_ data: some DataProtocol) throws(JSONError) -> JSONValue {
        try parse(Array(data), exactIntegers: true)
    }

    /// As `parseInput`, but content that is refused while still well-formed JSON (a duplicate
    /// name, an out-of-range or inexact number) is returned as `problem` beside the value read
    /// anyway, instead of thrown: the admin server reads a bad request's `id` to answer it.
    public static func parseInputReportingProblem(_ data: some DataProtocol) throws(JSONError) -> (value: JSONValue, problem: JSONError?) {
        try Array(data).withUnsafeBufferPointer { buffer throws(JSONError) in
            try JSONParser.parse(buffer, exactIntegers: true, tolerant: true)
        }
    }

    private static func parse(_ bytes: [UInt8], exactIntegers: Bool) throws(JSONError) -> JSONValue {
        try bytes.withUnsafeBufferPointer { buffer throws(JSONError) in
            try JSONParser.parse(buffer, exactIntegers: exactIntegers).value
        }
    }
}

extension JSONValue: Codable {
    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    public init(from decoder: any Decoder) throws {
        if decoder.codingPath.count > JSONValue.depthMax { throw JSONError.tooDeep }
        if var array = try? decoder.unkeyedContainer() {
            var elements: [JSONValue] = []
            if let count = array.count { elements.reserveCapacity(count) }
            while !array.isAtEnd { elements.append(try array.decode(JSONValue.self)) }
            self = .array(elements)
            return
        }
        if let object = try? decoder.container(keyedBy: Key.self) {
            var members: [String: JSONValue] = [:]
            members.reserveCapacity(object.allKeys.count)
            for key in object.allKeys {
                members[key.stringValue] = try object.decode(JSONValue.self, forKey: key)
            }
            self = .object(members)
            return
        }
        let single = try decoder.singleValueContainer()
        if single.decodeNil() {
            self = .null
        } else if let value = try? single.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? single.decode(Int64.self) {
            self = .int(value)
        } else if let value = try? single.decode(Double.self) {
            guard value.isFinite else { throw JSONError.numberOutOfRange("\(value)") }
            self = .double(value)
        } else {
            self = .string(try single.decode(String.self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .null:
            var single = encoder.singleValueContainer()
            try single.encodeNil()
        case .bool(let value):
            var single = encoder.singleValueContainer()
            try single.encode(value)
        case .int(let value):
            var single = encoder.singleValueContainer()
            try single.encode(value)
        case .double(let value):
            var single = encoder.singleValueContainer()
            try single.encode(value)
        case .string(let value):
            var single = encoder.singleValueContainer()
            try single.encode(value)
        case .array(let elements):
            var array = encoder.unkeyedContainer()
            for element in elements { try array.encode(element) }
        case .object(let members):
            var object = encoder.container(keyedBy: Key.self)
            for (key, value) in members { try object.encode(value, forKey: Key(stringValue: key)) }
        }
    }
}
