import CanopyCore
import Foundation

/// Checks on everything a caller or a peer hands the store, applied before any write so that a
/// bad item fails its whole batch with nothing written (`StoreInputError`).
enum InputValidation {
    /// Checks a document id: 1 to `StoreLimits.documentIDBytesMax` UTF-8 bytes.
    static func checkDocumentID(_ id: String) throws(StoreInputError) {
        let count = id.utf8.count
        guard count > 0 else { throw .emptyDocumentID }
        guard count <= StoreLimits.documentIDBytesMax else {
            throw .documentIDTooLong(bytes: count, limit: StoreLimits.documentIDBytesMax)
        }
    }

    /// Canonical bytes of a body given as a value: it must be an object within the size limit.
    static func canonicalBody(_ body: JSONValue, documentID: String?) throws(StoreInputError) -> [UInt8] {
        try canonicalBody(body, encoded: CanonicalJSON.encode(body), documentID: documentID)
    }

    /// `canonicalBody(_:documentID:)` for a body already encoded as `bytes`.
    static func canonicalBody(_ body: JSONValue, encoded bytes: [UInt8], documentID: String?) throws(StoreInputError) -> [UInt8] {
        guard case .object = body else { throw .bodyNotObject(documentID: documentID) }
        guard bytes.count <= StoreLimits.bodyBytesMax else {
            throw .bodyTooLarge(documentID: documentID, bytes: bytes.count, limit: StoreLimits.bodyBytesMax)
        }
        return bytes
    }

    /// Parses JSON text into an object body, checking the size before parsing.
    static func parseBody(_ bytes: some Collection<UInt8>, documentID: String?) throws(StoreInputError) -> JSONValue {
        guard bytes.count <= StoreLimits.bodyBytesMax else {
            throw .bodyTooLarge(documentID: documentID, bytes: bytes.count, limit: StoreLimits.bodyBytesMax)
        }
        let value: JSONValue
        do {
            value = try JSONValue.parse(Data(bytes))
        } catch {
            throw .invalidJSON(documentID: documentID, detail: error.description)
        }
        guard case .object = value else { throw .bodyNotObject(documentID: documentID) }
        return value
    }

    /// Decodes a body the store wrote (canonical bytes): the fast reader, falling back to the
    /// general parser for anything it does not expect.
    static func storedBody(_ bytes: [UInt8], documentID: String?) throws(StoreInputError) -> JSONValue {
        if let value = CanonicalJSONReader.parse(bytes), case .object = value { return value }
        return try parseBody(bytes, documentID: documentID)
    }

    /// Checks bytes received as a canonical body (replication input): size, then canonical form.
    static func checkCanonicalBody(_ bytes: [UInt8], documentID: String) throws(StoreInputError) {
        guard bytes.count <= StoreLimits.bodyBytesMax else {
            throw .bodyTooLarge(documentID: documentID, bytes: bytes.count, limit: StoreLimits.bodyBytesMax)
        }
        if let problem = CanonicalJSONCheck.problem(in: bytes) {
            if bytes.first != UInt8(ascii: "{"), (try? JSONValue.parse(Data(bytes))) != nil {
                throw .bodyNotObject(documentID: documentID)
            }
            throw .bodyNotCanonical(documentID: documentID, detail: problem)
        }
    }
}

/// Parsing of ids received as text or bytes (from the wire or a file), with typed errors.
package enum StoreInput {
    /// Decodes and checks a document id given as UTF-8 bytes.
    public static func documentID(utf8 bytes: some Collection<UInt8>) throws(StoreInputError) -> String {
        guard bytes.count <= StoreLimits.documentIDBytesMax else {
            throw .documentIDTooLong(bytes: bytes.count, limit: StoreLimits.documentIDBytesMax)
        }
        guard let id = String(validating: bytes, as: UTF8.self) else { throw .documentIDNotUTF8 }
        try InputValidation.checkDocumentID(id)
        return id
    }

    /// Parses a revision id, naming the document in the error.
    public static func revisionID(_ text: String, of documentID: String?) throws(StoreInputError) -> RevisionID {
        guard let revision = RevisionID(text) else { throw .malformedRevisionID(documentID: documentID, text: text) }
        return revision
    }
}
