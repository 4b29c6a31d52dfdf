import CanopyCore

/// Why a JSON value did not decode as the type asked for, said the way the admin protocol
/// answers a bad argument: the member's path (`node_id`, `docs[3]._id`) and what it should be.
public struct JSONValueDecodingError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong.
    public enum Problem: Sendable, Equatable {
        /// The member is absent (or null) where a value is needed; `expected` says what it
        /// should be ("a string").
        case missing(expected: String)
        /// The member has another type.
        case wrongType(expected: String)
        /// The member has the right type, but not a value the type takes (a malformed revision
        /// id); the text says why, without the member's name.
        case invalid(String)
    }

    /// The member's path in snake case, `.`-separated, array indices in brackets; empty for the
    /// value itself.
    public var path: String
    /// What is wrong with it.
    public var problem: Problem

    public var description: String {
        let name = path.isEmpty ? "the value" : "\"\(path)\""
        switch problem {
        case .missing(let expected): return "\(name) is missing: it must be \(expected)"
        case .wrongType(let expected): return "\(name) must be \(expected)"
        case .invalid(let reason): return "\(name) \(reason)"
        }
    }

    static func at(_ path: [any CodingKey], _ problem: Problem) -> JSONValueDecodingError {
        var text = ""
        for key in path {
            if let index = key.intValue {
                text += "[\(index)]"
            } else {
                if !text.isEmpty { text += "." }
                text += AdminKeys.snakeCase(key.stringValue)
            }
        }
        return JSONValueDecodingError(path: text, problem: problem)
    }
}

/// A type that says, for a refusal, what a valid value of it looks like ("a revision id").
public protocol AdminValueDescribing {
    /// A noun phrase: "a revision id", "one of read, write, read-write".
    static var valueDescription: String { get }
}

extension RevisionID: AdminValueDescribing {
    public static var valueDescription: String { "a revision id (N-<32 hex>)" }
}

/// Decodes `Decodable` values from `JSONValue` trees: what `JSONValueEncoder` wrote, or a
/// request line the agent parsed as user input (`JSONValue.parseInputReportingProblem`, which
/// refuses duplicate names and numbers that JSON cannot hold exactly before any decoding).
///
/// Member names are looked up in snake case (`AdminKeys`). Errors are `JSONValueDecodingError`s,
/// which name the member and the type wanted, in the admin protocol's words.
public struct JSONValueDecoder: Sendable {
    /// Creates a decoder.
    public init() {}

    /// `value` decoded as `T`.
    public func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws(JSONValueDecodingError) -> T {
        do {
            return try DecodingNode.decode(type, from: value, path: [])
        } catch let error as JSONValueDecodingError {
            throw error
        } catch let error as DecodingError {
            throw Self.translate(error)
        } catch {
            throw JSONValueDecodingError(path: "", problem: .invalid("\(error)"))
        }
    }

    /// A `DecodingError` a type's own `init(from:)` threw, in the protocol's words.
    static func translate(_ error: DecodingError) -> JSONValueDecodingError {
        switch error {
        case .keyNotFound(let key, let context):
            return .at(context.codingPath + [key], .missing(expected: "a value"))
        case .valueNotFound(let type, let context):
            return .at(context.codingPath, .missing(expected: DecodingNode.describe(type)))
        case .typeMismatch(let type, let context):
            return .at(context.codingPath, .wrongType(expected: DecodingNode.describe(type)))
        case .dataCorrupted(let context):
            return .at(context.codingPath, .invalid(context.debugDescription))
        @unknown default:
            return JSONValueDecodingError(path: "", problem: .invalid("\(error)"))
        }
    }
}

/// The decoder of one value.
struct DecodingNode: Decoder {
    let value: JSONValue
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    /// What a value of `type` is, for refusals.
    static func describe(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: return "a string"
        case is Bool.Type: return "true or false"
        case is Int.Type, is Int64.Type, is Int32.Type, is UInt64.Type, is UInt32.Type, is UInt16.Type, is UInt8.Type: return "an integer"
        case is Double.Type, is Float.Type: return "a number"
        case is JSONValue.Type: return "a JSON value"
        case let described as any AdminValueDescribing.Type: return described.valueDescription
        case is any StringKeyedDictionary.Type: return "a JSON object"
        default:
            let name = String(describing: type)
            return name.hasPrefix("Array<") ? "an array" : "a JSON object"
        }
    }

    /// `value` decoded as `T`; the fast paths take bodies and scalars without containers.
    static func decode<T: Decodable>(_ type: T.Type, from value: JSONValue, path: [any CodingKey]) throws -> T {
        if T.self == JSONValue.self { return value as! T }
        if T.self == String.self {
            guard case .string(let text) = value else { throw mismatch(T.self, value, path) }
            return text as! T
        }
        if T.self == Bool.self {
            guard case .bool(let flag) = value else { throw mismatch(T.self, value, path) }
            return flag as! T
        }
        if T.self == Int64.self {
            guard case .int(let number) = value else { throw mismatch(T.self, value, path) }
            return number as! T
        }
        if T.self == Int.self {
            guard case .int(let number) = value, let fitting = Int(exactly: number) else { throw mismatch(T.self, value, path) }
            return fitting as! T
        }
        if T.self == Double.self {
            switch value {
            case .double(let number): return number as! T
            case .int(let number): return Double(number) as! T
            default: throw mismatch(T.self, value, path)
            }
        }
        if let choice = T.self as? any AdminChoice.Type {
            guard case .string(let text) = value else { throw mismatch(T.self, value, path) }
            guard let chosen = choice.init(choiceName: text) else {
                throw JSONValueDecodingError.at(path, .invalid("must be \(choice.valueDescription), not \"\(text.prefix(80))\""))
            }
            return chosen as! T
        }
        if let dictionary = T.self as? any StringKeyedDictionary.Type {
            guard case .object(let members) = value else { throw mismatch(T.self, value, path) }
            return try dictionary.decodeMembers(members, path: path) as! T
        }
        do {
            return try T(from: DecodingNode(value: value, codingPath: path))
        } catch let error as JSONValueDecodingError {
            // A type read from a string (a revision id) refuses a number as itself, not as a string.
            if let described = T.self as? any AdminValueDescribing.Type, case .wrongType = error.problem,
                error.path == JSONValueDecodingError.at(path, error.problem).path
            {
                throw JSONValueDecodingError.at(path, .wrongType(expected: described.valueDescription))
            }
            throw error
        } catch let error as DecodingError {
            // A type's own check (a malformed revision id) names the member it was asked of.
            if case .dataCorrupted(let context) = error, context.codingPath.count <= path.count {
                throw JSONValueDecodingError.at(path, .invalid(context.debugDescription))
            }
            throw JSONValueDecoder.translate(error)
        }
    }

    static func mismatch(_ type: Any.Type, _ value: JSONValue, _ path: [any CodingKey]) -> JSONValueDecodingError {
        if case .null = value { return .at(path, .missing(expected: describe(type))) }
        return .at(path, .wrongType(expected: describe(type)))
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = value else { throw Self.mismatch([String: JSONValue].self, value, codingPath) }
        return KeyedDecodingContainer(KeyedContainer<Key>(members: members, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let elements) = value else { throw Self.mismatch([JSONValue].self, value, codingPath) }
        return UnkeyedContainer(elements: elements, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { SingleContainer(node: self) }

    struct KeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let members: [String: JSONValue]
        let codingPath: [any CodingKey]

        var allKeys: [Key] {
            members.keys.compactMap { Key(stringValue: $0) }
        }

        private func member(_ key: Key) -> JSONValue? { members[AdminKeys.snakeCase(key.stringValue)] }

        func contains(_ key: Key) -> Bool { member(key) != nil }

        func decodeNil(forKey key: Key) throws -> Bool {
            switch member(key) {
            case nil, .null?: return true
            default: return false
            }
        }

        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
            if T.self is any AdminFlattened.Type { return try DecodingNode.decode(type, from: .object(members), path: codingPath) }
            guard let value = member(key) else {
                throw JSONValueDecodingError.at(codingPath + [key], .missing(expected: DecodingNode.describe(T.self)))
            }
            return try DecodingNode.decode(type, from: value, path: codingPath + [key])
        }

        func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
            try DecodingNode(value: try decode(JSONValue.self, forKey: key), codingPath: codingPath + [key]).container(keyedBy: type)
        }

        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
            try DecodingNode(value: try decode(JSONValue.self, forKey: key), codingPath: codingPath + [key]).unkeyedContainer()
        }

        func superDecoder() throws -> any Decoder {
            DecodingNode(value: .object(members), codingPath: codingPath)
        }

        func superDecoder(forKey key: Key) throws -> any Decoder {
            DecodingNode(value: member(key) ?? .null, codingPath: codingPath + [key])
        }
    }

    struct UnkeyedContainer: UnkeyedDecodingContainer {
        let elements: [JSONValue]
        let codingPath: [any CodingKey]
        var currentIndex = 0
        var count: Int? { elements.count }
        var isAtEnd: Bool { currentIndex >= elements.count }

        init(elements: [JSONValue], codingPath: [any CodingKey]) {
            self.elements = elements
            self.codingPath = codingPath
        }

        private var key: AdminCodingKey { AdminCodingKey(intValue: currentIndex) }

        mutating func decodeNil() throws -> Bool {
            guard !isAtEnd else { throw JSONValueDecodingError.at(codingPath + [key], .missing(expected: "a value")) }
            if case .null = elements[currentIndex] {
                currentIndex += 1
                return true
            }
            return false
        }

        mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
            guard !isAtEnd else { throw JSONValueDecodingError.at(codingPath + [key], .missing(expected: DecodingNode.describe(T.self))) }
            let value = try DecodingNode.decode(type, from: elements[currentIndex], path: codingPath + [key])
            currentIndex += 1
            return value
        }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
            let path = codingPath + [key]
            return try DecodingNode(value: try decode(JSONValue.self), codingPath: path).container(keyedBy: type)
        }

        mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
            let path = codingPath + [key]
            return try DecodingNode(value: try decode(JSONValue.self), codingPath: path).unkeyedContainer()
        }

        mutating func superDecoder() throws -> any Decoder {
            let path = codingPath + [key]
            return DecodingNode(value: try decode(JSONValue.self), codingPath: path)
        }
    }

    struct SingleContainer: SingleValueDecodingContainer {
        let node: DecodingNode
        var codingPath: [any CodingKey] { node.codingPath }

        func decodeNil() -> Bool {
            if case .null = node.value { return true }
            return false
        }

        func decode<T: Decodable>(_ type: T.Type) throws -> T {
            try DecodingNode.decode(type, from: node.value, path: node.codingPath)
        }
    }
}
