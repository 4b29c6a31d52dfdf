import CanopyCore
import CanopyStore

/// Many writes in one transaction: ``saveBatch(_:concurrency:)`` writes all of them or none,
/// ``saveBulk(_:)`` writes each on its own (CouchDB's `_bulk_docs`). Both check every write's
/// input before anything is written, and take at most 100,000 writes.
extension Database {
    /// Applies `writes` in order in one transaction, all of them or none, and returns their new
    /// revisions in the same order. A stale `replacing` is handled by `concurrency` as `save`
    /// handles it; one that `concurrency` gives up on fails the whole batch with
    /// `DatabaseError.conflict`.
    @discardableResult
    public func saveBatch(_ writes: [DocumentWrite], concurrency: WriteConcurrency = .failOnConflict) throws(DatabaseError) -> [RevisionID] {
        do { return try store.putBatch(writes.map(\.storeWrite), concurrency: concurrency) } catch {
            throw DatabaseError(error, documentID: nil)
        }
    }

    /// Applies `writes` in order in one transaction, each on its own: a stale `replacing` (a
    /// document that does not exist included, or a creation of one that exists) is reported for
    /// that write as `BulkWriteResult.conflict(current:)` and the others are written. Invalid
    /// input (an id, a body) fails the whole call before anything is written, naming the
    /// document. New documents take the store's batched path: a bulk load runs at its
    /// batched-write rate.
    public func saveBulk(_ writes: [DocumentWrite]) throws(DatabaseError) -> [BulkWriteResult] {
        do { return try store.putBulk(writes.map(\.storeWrite)) } catch { throw DatabaseError(error, documentID: nil) }
    }
}

/// One write of `Database.saveBatch(_:concurrency:)` or `Database.saveBulk(_:)`: a new body
/// for a document, or its deletion, on top of the revision it replaces.
public struct DocumentWrite: Sendable {
    /// The document.
    public var documentID: String
    /// The new body (a JSON object), or nil to delete the document.
    public var body: JSONValue?
    /// The revision replaced: nil to create the document (or re-create a deleted one); a
    /// deletion names the revision it deletes.
    public var replacing: RevisionID?

    /// A write of `body` (nil deletes) to `documentID` replacing `replacing`.
    public init(documentID: String, body: JSONValue?, replacing: RevisionID? = nil) {
        self.documentID = documentID
        self.body = body
        self.replacing = replacing
    }

    /// A write of `value` (encoded with `JSONEncoder`; it must encode as a JSON object) to
    /// `documentID` replacing `replacing`. Throws `DatabaseError.encodingFailed` or
    /// `.invalidDocument` when it does not encode as one.
    public init<T: Encodable>(documentID: String, value: T, replacing: RevisionID? = nil) throws(DatabaseError) {
        self.init(documentID: documentID, body: try DocumentCoding.encode(value, documentID: documentID), replacing: replacing)
    }

    /// The deletion of `documentID` on top of `revision`.
    public static func deletion(of documentID: String, revision: RevisionID) -> DocumentWrite {
        DocumentWrite(documentID: documentID, body: nil, replacing: revision)
    }

    /// The store's form of the write.
    var storeWrite: LocalWrite { LocalWrite(documentID: documentID, body: body, replacing: replacing) }
}
