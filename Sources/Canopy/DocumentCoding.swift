import CanopyCore
import CanopyStore
import Foundation

/// Codable values to and from document bodies, through Foundation's `JSONEncoder` and
/// `JSONDecoder`. A value is encoded to JSON text with sorted keys (the order canonical JSON
/// uses; the store canonicalises again anyway) and read back as a `JSONValue` the way the store
/// reads a body a user wrote (`JSONValue.parseInput`: duplicate names and numbers JSON cannot
/// hold exactly are refused, not rounded). A new coder per call: they are cheap to make and this
/// keeps the `Database` free of shared mutable state.
enum DocumentCoding {
    /// `value` as a JSON value (any JSON value: the store refuses bodies that are not objects).
    static func encode<T: Encodable>(_ value: T, documentID: String) throws(DatabaseError) -> JSONValue {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data: Data
        do {
            data = try encoder.encode(value)
        } catch {
            throw .encodingFailed(documentID: documentID, detail: "\(error)")
        }
        do {
            return try JSONValue.parseInput(data)
        } catch {
            throw .invalidDocument(documentID: documentID, reason: "\(error)")
        }
    }

    /// `body` decoded as `T`; `revision` names the stored revision in the error.
    static func decode<T: Decodable>(
        _ type: T.Type, from body: JSONValue, documentID: String, revision: RevisionID
    ) throws(DatabaseError) -> T {
        do {
            let data = try JSONEncoder().encode(body)
            return try JSONDecoder().decode(type, from: data)
        } catch {
            throw .decodingFailed(documentID: documentID, revision: revision, detail: "\(error)")
        }
    }
}

extension Document {
    /// The document's body decoded as `type` (with `JSONDecoder`). Throws
    /// `DatabaseError.decodingFailed` when the stored JSON does not fit the type.
    public func value<T: Decodable>(as type: T.Type) throws(DatabaseError) -> T {
        try DocumentCoding.decode(type, from: body, documentID: id, revision: revision)
    }
}
