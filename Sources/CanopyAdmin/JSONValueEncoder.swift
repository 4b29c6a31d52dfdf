import CanopyCore

/// A type whose `nil` members are written as JSON `null` rather than left out. The admin
/// protocol's rows (a peer's status, a database's) name every member, null when unknown, so a
/// script can tell "none" from a member it misspelt; events and replies that leave a member out
/// when it does not apply (`rev` "when known") do not conform.
public protocol AdminExplicitNulls {}

/// A member type whose members are written into the object that holds it, not under its own
/// name: the document counts that `status`, `stats` and each `db.list` row carry at their top
/// level, one Swift type for all three.
public protocol AdminFlattened: Codable {}

/// Encodes `Encodable` values to `JSONValue` trees, the admin protocol's wire form before it is
/// written as canonical JSON (`CanonicalJSON.encode`).
///
/// Foundation's `JSONEncoder` writes text; the admin protocol needs the tree (a reply's members
/// are merged with `id` and `ok`, and document bodies are `JSONValue`s already, passed through as
/// they are rather than encoded and parsed again), and bytes that are canonical JSON, as every
/// other line the agent writes. Member names are converted to snake case (`AdminKeys`);
/// a `nil` optional is left out unless its type conforms to `AdminExplicitNulls`.
public struct JSONValueEncoder: Sendable {
    /// Creates an encoder.
    public init() {}

    /// `value` as a JSON value.
    public func encode<T: Encodable>(_ value: T) throws -> JSONValue {
        try EncodingNode.value(of: value, path: [])
    }

    /// `value`'s members, for a value that encodes as an object (`EncodingError.invalidValue`
    /// otherwise).
    public func encodeMembers<T: Encodable>(_ value: T) throws -> [String: JSONValue] {
        switch try encode(value) {
        case .object(let members): return members
        case .null: return [:]
        default:
            throw EncodingError.invalidValue(value, .init(codingPath: [], debugDescription: "\(T.self) does not encode as an object"))
        }
    }
}

/// Dictionaries keyed by strings encode and decode as objects whose member names are the keys,
/// unconverted (they are data: document ids, digests, database names).
protocol StringKeyedDictionary {
    func encodeMembers(path: [any CodingKey]) throws -> JSONValue
    static func decodeMembers(_ members: [String: JSONValue], path: [any CodingKey]) throws -> Self
}

extension Dictionary: StringKeyedDictionary where Key == String, Value: Codable {
    func encodeMembers(path: [any CodingKey]) throws -> JSONValue {
        var members: [String: JSONValue] = [:]
        members.reserveCapacity(count)
        for (key, value) in self {
            members[key] = try EncodingNode.value(of: value, path: path + [AdminCodingKey(key)])
        }
        return .object(members)
    }

    static func decodeMembers(_ members: [String: JSONValue], path: [any CodingKey]) throws -> Self {
        var result: [String: Value] = [:]
        result.reserveCapacity(members.count)
        for (key, value) in members {
            result[key] = try DecodingNode.decode(Value.self, from: value, path: path + [AdminCodingKey(key)])
        }
        return result
    }
}

/// A member name or array index in a coding path.
struct AdminCodingKey: CodingKey {
    var stringValue: String
    var intValue: Int?

    init(_ string: String) {
        stringValue = string
        intValue = nil
    }

    init(stringValue: String) { self.init(stringValue) }

    init(intValue: Int) {
        stringValue = String(intValue)
        self.intValue = intValue
    }
}

/// What one value encodes to, filled in by its containers. Nested containers share the parent's
/// storage through `Box`, so writes after the container was made are kept.
final class EncodingNode: Encoder {
    /// A value, an object or an array being built.
    enum Slot {
        case value(JSONValue)
        case object(ObjectBox)
        case array(ArrayBox)

        var resolved: JSONValue {
            switch self {
            case .value(let value): return value
            case .object(let box): return box.resolved
            case .array(let box): return box.resolved
            }
        }
    }

    final class ObjectBox {
        var members: [String: Slot] = [:]
        var resolved: JSONValue { .object(members.mapValues(\.resolved)) }
    }

    final class ArrayBox {
        var elements: [Slot] = []
        var resolved: JSONValue { .array(elements.map(\.resolved)) }
    }

    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }
    /// Whether this value's `nil` members are written as null.
    let explicitNulls: Bool
    var slot: Slot?

    init(path: [any CodingKey], explicitNulls: Bool) {
        codingPath = path
        self.explicitNulls = explicitNulls
    }

    /// `value` as a JSON value; the fast paths keep bodies and scalars from going through
    /// containers.
    static func value<T: Encodable>(of value: T, path: [any CodingKey]) throws -> JSONValue {
        switch value {
        case let json as JSONValue: return json
        case let text as String: return .string(text)
        case let flag as Bool: return .bool(flag)
        case let number as Int64: return .int(number)
        case let number as Int: return .int(Int64(number))
        case let number as Double:
            guard number.isFinite else {
                throw EncodingError.invalidValue(number, .init(codingPath: path, debugDescription: "JSON has no \(number)"))
            }
            return .double(number)
        case let dictionary as any StringKeyedDictionary: return try dictionary.encodeMembers(path: path)
        default:
            let node = EncodingNode(path: path, explicitNulls: value is any AdminExplicitNulls)
            try value.encode(to: node)
            return node.slot?.resolved ?? .object([:])
        }
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        let box: ObjectBox
        if case .object(let existing)? = slot {
            box = existing
        } else {
            box = ObjectBox()
            slot = .object(box)
        }
        return KeyedEncodingContainer(KeyedContainer<Key>(node: self, box: box, path: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        let box: ArrayBox
        if case .array(let existing)? = slot {
            box = existing
        } else {
            box = ArrayBox()
            slot = .array(box)
        }
        return UnkeyedContainer(node: self, box: box, path: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        SingleContainer(node: self)
    }

    struct KeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
        let node: EncodingNode
        let box: ObjectBox
        let path: [any CodingKey]
        var codingPath: [any CodingKey] { path }

        private func name(_ key: Key) -> String { AdminKeys.snakeCase(key.stringValue) }

        mutating func encodeNil(forKey key: Key) throws { box.members[name(key)] = .value(.null) }

        mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
            let encoded = try EncodingNode.value(of: value, path: path + [key])
            if value is any AdminFlattened, case .object(let members) = encoded {
                for (member, value) in members { box.members[member] = .value(value) }
                return
            }
            box.members[name(key)] = .value(encoded)
        }

        mutating func encodeIfPresent<T: Encodable>(_ value: T?, forKey key: Key) throws { try encodeIfPresent(value, generic: key) }

        // The scalar overloads of `encodeIfPresent` go through the generic one, so that
        // `explicitNulls` applies to them too.
        mutating func encodeIfPresent(_ value: Bool?, forKey key: Key) throws { try encodeIfPresent(value as Bool?, generic: key) }
        mutating func encodeIfPresent(_ value: String?, forKey key: Key) throws { try encodeIfPresent(value as String?, generic: key) }
        mutating func encodeIfPresent(_ value: Double?, forKey key: Key) throws { try encodeIfPresent(value as Double?, generic: key) }
        mutating func encodeIfPresent(_ value: Int?, forKey key: Key) throws { try encodeIfPresent(value as Int?, generic: key) }
        mutating func encodeIfPresent(_ value: Int64?, forKey key: Key) throws { try encodeIfPresent(value as Int64?, generic: key) }

        private mutating func encodeIfPresent<T: Encodable>(_ value: T?, generic key: Key) throws {
            if let value {
                try encode(value, forKey: key)
            } else if node.explicitNulls {
                try encodeNil(forKey: key)
            }
        }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
            let nested = ObjectBox()
            box.members[name(key)] = .object(nested)
            return KeyedEncodingContainer(KeyedContainer<NestedKey>(node: node, box: nested, path: path + [key]))
        }

        mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
            let nested = ArrayBox()
            box.members[name(key)] = .array(nested)
            return UnkeyedContainer(node: node, box: nested, path: path + [key])
        }

        mutating func superEncoder() -> any Encoder { superEncoder(forKey: Key(stringValue: "super")!) }

        mutating func superEncoder(forKey key: Key) -> any Encoder {
            let child = EncodingNode(path: path + [key], explicitNulls: node.explicitNulls)
            let nested = ObjectBox()
            child.slot = .object(nested)
            box.members[name(key)] = .object(nested)
            return child
        }
    }

    struct UnkeyedContainer: UnkeyedEncodingContainer {
        let node: EncodingNode
        let box: ArrayBox
        let path: [any CodingKey]
        var codingPath: [any CodingKey] { path }
        var count: Int { box.elements.count }

        private var nextKey: AdminCodingKey { AdminCodingKey(intValue: box.elements.count) }

        mutating func encodeNil() throws { box.elements.append(.value(.null)) }

        mutating func encode<T: Encodable>(_ value: T) throws {
            box.elements.append(.value(try EncodingNode.value(of: value, path: path + [nextKey])))
        }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
            let nested = ObjectBox()
            let key = nextKey
            box.elements.append(.object(nested))
            return KeyedEncodingContainer(KeyedContainer<NestedKey>(node: node, box: nested, path: path + [key]))
        }

        mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
            let nested = ArrayBox()
            let key = nextKey
            box.elements.append(.array(nested))
            return UnkeyedContainer(node: node, box: nested, path: path + [key])
        }

        mutating func superEncoder() -> any Encoder {
            let child = EncodingNode(path: path + [nextKey], explicitNulls: node.explicitNulls)
            let nested = ObjectBox()
            child.slot = .object(nested)
            box.elements.append(.object(nested))
            return child
        }
    }

    struct SingleContainer: SingleValueEncodingContainer {
        let node: EncodingNode
        var codingPath: [any CodingKey] { node.codingPath }

        mutating func encodeNil() throws { node.slot = .value(.null) }

        mutating func encode<T: Encodable>(_ value: T) throws {
            node.slot = .value(try EncodingNode.value(of: value, path: node.codingPath))
        }
    }
}
