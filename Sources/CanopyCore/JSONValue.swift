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

/// Errors from parsing JSON text.
public enum JSONError: Error, Equatable, CustomStringConvertible {
    /// The bytes are not JSON; `detail` says where or why.
    case invalidJSON(detail: String)
    /// A number that JSON can write but a double cannot hold (infinity or NaN after parsing).
    case numberOutOfRange(String)
    /// Nesting deeper than `JSONValue.depthMax`.
    case tooDeep

    public var description: String {
        switch self {
        case .invalidJSON(let detail): return "invalid JSON: \(detail)"
        case .numberOutOfRange(let text): return "number out of range: \(text)"
        case .tooDeep: return "JSON nested deeper than \(JSONValue.depthMax) levels"
        }
    }
}

extension JSONValue {
    /// The deepest nesting of arrays and objects accepted.
    public static let depthMax = 256

    /// Parses JSON text (any value, not only objects).
    public static func parse(_ data: some DataProtocol) throws(JSONError) -> JSONValue {
        let bytes = Data(data)
        do {
            return try JSONDecoder().decode(JSONValue.self, from: bytes)
        } catch let error as DecodingError {
            switch error {
            case .dataCorrupted(let context):
                let underlying = (context.underlyingError as NSError?)?.userInfo[NSDebugDescriptionErrorKey] as? String
                throw .invalidJSON(detail: underlying ?? context.debugDescription)
            default:
                throw .invalidJSON(detail: "\(error)")
            }
        } catch let error as JSONError {
            throw error
        } catch {
            throw .invalidJSON(detail: "\(error)")
        }
    }

    /// Parses JSON text from a string.
    public static func parse(_ text: String) throws(JSONError) -> JSONValue {
        try parse(Data(text.utf8))
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
