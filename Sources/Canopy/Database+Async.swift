import CanopyCore
import CanopyStore
import Dispatch

/// The document calls, awaited: each runs on the database's own serial queue, never on a thread
/// of Swift's cooperative pool, so a task that awaits a write leaves the pool free for others
/// while SQLite works (a synchronous call blocks its caller's thread for one transaction). In an
/// `async` context these are the ones Swift picks; they behave as the synchronous calls of the
/// same names.
extension Database {
    /// `document(id:)`, awaited.
    public func document(id: String) async throws(DatabaseError) -> Document? {
        try await offPool { () throws(DatabaseError) in try self.document(id: id) }
    }

    /// `document(id:as:)`, awaited.
    public func document<T: Decodable & Sendable>(id: String, as type: T.Type) async throws(DatabaseError) -> T? {
        try await offPool { () throws(DatabaseError) in try self.document(id: id, as: type) }
    }

    /// `save(_:id:replacing:concurrency:)`, awaited.
    @discardableResult
    public func save<T: Encodable & Sendable>(
        _ value: T, id: String, replacing: RevisionID? = nil, concurrency: WriteConcurrency = .failOnConflict
    ) async throws(DatabaseError) -> RevisionID {
        try await offPool { () throws(DatabaseError) in try self.save(value, id: id, replacing: replacing, concurrency: concurrency) }
    }

    /// `save(json:id:replacing:concurrency:)`, awaited.
    @discardableResult
    public func save(
        json: JSONValue, id: String, replacing: RevisionID? = nil, concurrency: WriteConcurrency = .failOnConflict
    ) async throws(DatabaseError) -> RevisionID {
        try await offPool { () throws(DatabaseError) in try self.save(json: json, id: id, replacing: replacing, concurrency: concurrency) }
    }

    /// `delete(id:revision:concurrency:)`, awaited.
    @discardableResult
    public func delete(
        id: String, revision: RevisionID, concurrency: WriteConcurrency = .failOnConflict
    ) async throws(DatabaseError) -> RevisionID {
        try await offPool { () throws(DatabaseError) in try self.delete(id: id, revision: revision, concurrency: concurrency) }
    }

    /// Runs `body` on `queue` and returns what it returned.
    private func offPool<R: Sendable>(_ body: @escaping @Sendable () throws(DatabaseError) -> R) async throws(DatabaseError) -> R {
        let result = await withCheckedContinuation { (done: CheckedContinuation<Result<R, DatabaseError>, Never>) in
            queue.async { done.resume(returning: Result { () throws(DatabaseError) -> R in try body() }) }
        }
        return try result.get()
    }
}
