import CanopyCore
import CanopyStore
import Dispatch
import Foundation

/// Every call that reads or writes the file, awaited: each runs on the database's own serial
/// queue, never on a thread of Swift's cooperative pool, so a task that awaits a write leaves the
/// pool free for others while SQLite works (a synchronous call blocks its caller's thread for one
/// transaction). In an `async` context these are the ones Swift picks; they behave as the
/// synchronous calls of the same names. The changes feed (``changes(since:)``) reads its pages
/// on the same queue; `attachmentContents` streams from a thread of its own.
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

}

/// Conflicts, awaited.
extension Database {
    /// `conflictedDocumentIDs()`, awaited.
    public func conflictedDocumentIDs() async throws(DatabaseError) -> [String] {
        try await offPool { () throws(DatabaseError) in try self.conflictedDocumentIDs() }
    }

    /// `resolveConflicts(id:resolver:)`, awaited.
    @discardableResult
    public func resolveConflicts(id: String, resolver: any ConflictResolver) async throws(DatabaseError) -> RevisionID {
        try await offPool { () throws(DatabaseError) in try self.resolveConflicts(id: id, resolver: resolver) }
    }

    /// `save(_:id:replacing:conflictHandler:)`, awaited.
    @discardableResult
    public func save<T: Codable & Sendable>(
        _ value: T, id: String, replacing: RevisionID?,
        conflictHandler: @escaping @Sendable (_ proposed: T, _ current: T?) throws -> T?
    ) async throws(DatabaseError) -> RevisionID {
        try await offPool { () throws(DatabaseError) in try self.save(value, id: id, replacing: replacing, conflictHandler: conflictHandler) }
    }
}

/// Attachments, awaited.
extension Database {
    /// `attachments(of:)`, awaited.
    public func attachments(of id: String) async throws(DatabaseError) -> [String: AttachmentMetadata]? {
        try await offPool { () throws(DatabaseError) in try self.attachments(of: id) }
    }

    /// `attach(_:to:contentsOf:contentType:replacing:concurrency:)`, awaited: the content is
    /// copied in, and the revision saved, off the cooperative pool.
    @discardableResult
    public func attach(
        _ name: String, to id: String, contentsOf file: URL, contentType: String, replacing: RevisionID,
        concurrency: WriteConcurrency = .failOnConflict
    ) async throws(DatabaseError) -> RevisionID {
        try await offPool { () throws(DatabaseError) in
            try self.attach(name, to: id, contentsOf: file, contentType: contentType, replacing: replacing, concurrency: concurrency)
        }
    }

    /// `detach(_:from:replacing:concurrency:)`, awaited.
    @discardableResult
    public func detach(
        _ name: String, from id: String, replacing: RevisionID, concurrency: WriteConcurrency = .failOnConflict
    ) async throws(DatabaseError) -> RevisionID {
        try await offPool { () throws(DatabaseError) in try self.detach(name, from: id, replacing: replacing, concurrency: concurrency) }
    }

    /// `attachmentFile(_:of:)`, awaited.
    public func attachmentFile(_ name: String, of id: String) async throws(DatabaseError) -> URL {
        try await offPool { () throws(DatabaseError) in try self.attachmentFile(name, of: id) }
    }

    /// `attachmentContents(_:of:)`, awaited: the attachment is looked up off the cooperative pool
    /// (the parts are read on a thread of their own either way).
    public func attachmentContents(_ name: String, of id: String) async throws(DatabaseError) -> AsyncThrowingStream<[UInt8], any Error> {
        try await offPool { () throws(DatabaseError) in try self.attachmentContents(name, of: id) }
    }

    /// `compactAttachments()`, awaited.
    public func compactAttachments() async throws(DatabaseError) -> AttachmentGarbageReport {
        try await offPool { () throws(DatabaseError) in try self.compactAttachments() }
    }

    /// `compactAttachments(of:)`, awaited: it runs on the first database's queue.
    public static func compactAttachments(of databases: [Database]) async throws(DatabaseError) -> AttachmentGarbageReport {
        let queue = databases.first?.queue ?? DispatchQueue(label: "canopy.database")
        return try await offPool(on: queue) { () throws(DatabaseError) in try compactAttachments(of: databases) }
    }
}

/// Local documents, many writes at once, backups and compaction, awaited.
extension Database {
    /// `localDocument(id:)`, awaited.
    public func localDocument(id: String) async throws(DatabaseError) -> JSONValue? {
        try await offPool { () throws(DatabaseError) in try self.localDocument(id: id) }
    }

    /// `saveLocal(json:id:)`, awaited.
    public func saveLocal(json: JSONValue, id: String) async throws(DatabaseError) {
        try await offPool { () throws(DatabaseError) in try self.saveLocal(json: json, id: id) }
    }

    /// `deleteLocal(id:)`, awaited.
    @discardableResult
    public func deleteLocal(id: String) async throws(DatabaseError) -> Bool {
        try await offPool { () throws(DatabaseError) in try self.deleteLocal(id: id) }
    }

    /// `saveBatch(_:concurrency:)`, awaited.
    @discardableResult
    public func saveBatch(_ writes: [DocumentWrite], concurrency: WriteConcurrency = .failOnConflict) async throws(DatabaseError) -> [RevisionID] {
        try await offPool { () throws(DatabaseError) in try self.saveBatch(writes, concurrency: concurrency) }
    }

    /// `saveBulk(_:)`, awaited.
    public func saveBulk(_ writes: [DocumentWrite]) async throws(DatabaseError) -> [BulkWriteResult] {
        try await offPool { () throws(DatabaseError) in try self.saveBulk(writes) }
    }

    /// `backup(to:)`, awaited.
    @discardableResult
    public func backup(to path: String) async throws(DatabaseError) -> BackupReport {
        try await offPool { () throws(DatabaseError) in try self.backup(to: path) }
    }

    /// `compact()`, awaited.
    @discardableResult
    public func compact() async throws(DatabaseError) -> Int {
        try await offPool { () throws(DatabaseError) in try self.compact() }
    }
}

extension Database {
    /// Runs `body` on `queue` and returns what it returned.
    func offPool<R: Sendable>(_ body: @escaping @Sendable () throws(DatabaseError) -> R) async throws(DatabaseError) -> R {
        try await Self.offPool(on: queue, body)
    }

    /// Runs `body` on `queue` and returns what it returned.
    static func offPool<R: Sendable>(
        on queue: DispatchQueue, _ body: @escaping @Sendable () throws(DatabaseError) -> R
    ) async throws(DatabaseError) -> R {
        let result = await withCheckedContinuation { (done: CheckedContinuation<Result<R, DatabaseError>, Never>) in
            queue.async { done.resume(returning: Result { () throws(DatabaseError) -> R in try body() }) }
        }
        return try result.get()
    }
}
