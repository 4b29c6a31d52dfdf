import CanopyCore
import CanopyStore

/// Reading, saving and deleting documents, as `Codable` values or as raw JSON.
///
/// Saves use optimistic concurrency: `replacing` is the revision the new value was derived from
/// (nil to create a document, or to re-create a deleted one). When someone else saved in between,
/// `concurrency` decides: `.failOnConflict` (the default) throws `DatabaseError.conflict` with the
/// current revision, `.lastWriteWins` saves on top of it anyway, `.handler` asks a closure.
extension Database {
    /// The current revision of `id`; nil when the document does not exist or is deleted.
    public func document(id: String) throws(DatabaseError) -> Document? {
        do {
            let document = try store.get(id: id)
            return document.isDeleted ? nil : document
        } catch .notFound {
            return nil
        } catch {
            throw DatabaseError(error, documentID: id)
        }
    }

    /// The current revision of `id` decoded as `type`; nil when the document does not exist or
    /// is deleted. Throws `DatabaseError.decodingFailed` when the stored JSON does not fit `type`.
    public func document<T: Decodable>(id: String, as type: T.Type) throws(DatabaseError) -> T? {
        try document(id: id)?.value(as: type)
    }

    /// Saves `value` (encoded with `JSONEncoder`; it must encode as a JSON object) as a new
    /// revision of `id` replacing `replacing`, and returns the new revision.
    @discardableResult
    public func save<T: Encodable>(
        _ value: T, id: String, replacing: RevisionID? = nil, concurrency: WriteConcurrency = .failOnConflict
    ) throws(DatabaseError) -> RevisionID {
        try save(json: DocumentCoding.encode(value, documentID: id), id: id, replacing: replacing, concurrency: concurrency)
    }

    /// Saves `json` (a JSON object) as a new revision of `id` replacing `replacing`, and returns
    /// the new revision.
    @discardableResult
    public func save(
        json: JSONValue, id: String, replacing: RevisionID? = nil, concurrency: WriteConcurrency = .failOnConflict
    ) throws(DatabaseError) -> RevisionID {
        do {
            return try store.put(id: id, body: json, replacing: replacing, concurrency: concurrency)
        } catch {
            throw DatabaseError(error, documentID: id)
        }
    }

    /// Saves `value` as a new revision of `id` replacing `replacing`; when that revision is stale,
    /// asks `conflictHandler` (Couchbase Lite's `saveDocument(_:conflictHandler:)`).
    ///
    /// The handler gets the proposed value and the current one decoded as `T` (nil when the
    /// current revision is a deletion) and returns the value to save on top of the current
    /// revision, or nil to give up with `DatabaseError.conflict`. It runs inside the write
    /// transaction, under the database's lock: it must be quick and must not call the database.
    /// If it throws, nothing is written and the save fails with `DatabaseError.handlerFailed`; a
    /// current revision that does not decode as `T` fails it with `DatabaseError.decodingFailed`.
    @discardableResult
    public func save<T: Codable & Sendable>(
        _ value: T, id: String, replacing: RevisionID?,
        conflictHandler: @escaping @Sendable (_ proposed: T, _ current: T?) throws -> T?
    ) throws(DatabaseError) -> RevisionID {
        let body = try DocumentCoding.encode(value, documentID: id)
        let handler = WriteConcurrency.handler { conflict in
            let current: T? = conflict.current.isDeleted ? nil : try conflict.current.value(as: T.self)
            guard let merged = try conflictHandler(value, current) else { return nil }
            return try DocumentCoding.encode(merged, documentID: id)
        }
        return try save(json: body, id: id, replacing: replacing, concurrency: handler)
    }

    /// Deletes `id` by saving a deletion on top of `revision` and returns the deletion's revision.
    /// A stale `revision` is handled by `concurrency` as a save's is (a `.handler` closure that
    /// returns a body saves that body instead of deleting). Deleting a missing document throws
    /// `DatabaseError.notFound`.
    @discardableResult
    public func delete(
        id: String, revision: RevisionID, concurrency: WriteConcurrency = .failOnConflict
    ) throws(DatabaseError) -> RevisionID {
        do {
            return try store.delete(id: id, rev: revision, concurrency: concurrency)
        } catch {
            throw DatabaseError(error, documentID: id)
        }
    }
}
