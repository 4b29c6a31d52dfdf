import CanopyCore
import CanopyStore

/// Backups and compaction of one database.
extension Database {
    /// Writes a consistent snapshot of the database to a new file at `path` while it keeps
    /// writing (SQLite's `VACUUM INTO`, from a connection of its own: compact, no log beside it),
    /// and copies the attachment content its revisions name into `PATH-attachments`, where a
    /// ``Database`` opened at `path` looks for it. Each content file is checked against its
    /// digest as it is copied: damaged or missing content is not copied but listed in the
    /// report's ``BackupReport/attachmentProblems``. The content is pinned from before the
    /// snapshot until it is copied, so a compaction meanwhile cannot remove it. Fails with
    /// `DatabaseError.storageFailed` when `path` exists or cannot be written.
    ///
    /// A ``Node``'s whole data directory (every database, its config, optionally its identity)
    /// is backed up by ``Node/backup(to:withIdentity:)``.
    @discardableResult
    public func backup(to path: String) throws(DatabaseError) -> BackupReport {
        let target = AttachmentStore(directory: path + "-attachments", sizeLimit: store.attachments.sizeLimit)
        do {
            let result = try store.backup(to: path, attachmentsTo: target)
            return BackupReport(
                documents: result.documents, attachments: result.attachmentFiles, attachmentBytes: result.attachmentBytes,
                attachmentProblems: result.attachmentProblems)
        } catch {
            throw DatabaseError(error, documentID: nil)
        }
    }

    /// Drops the bodies of old revisions (those that are no leaf), keeping the common ancestor
    /// of each open conflict for a three-way merge, rebuilds the file to return the space and
    /// empties SQLite's log; returns how many bodies were dropped. The attachment content only
    /// they named stays until `compactAttachments()` (a ``Node``'s: ``Node/compact(database:)``
    /// does both). Reads and writes wait while it runs.
    @discardableResult
    public func compact() throws(DatabaseError) -> Int {
        do { return try store.compact() } catch { throw DatabaseError(error, documentID: nil) }
    }
}

/// What a backup wrote (`Database.backup(to:)`, ``Node/backup(to:withIdentity:)``).
public struct BackupReport: Sendable, Equatable {
    /// Documents the backup holds that are not deleted (every database's, for a node).
    public var documents: Int
    /// Attachment content files copied (content the target held already is not counted).
    public var attachments: Int
    /// The bytes those files hold.
    public var attachmentBytes: Int64
    /// Content the backup's revisions name that could not be copied, one line each (its digest
    /// and why: not held here, or damaged). Empty for a complete backup.
    public var attachmentProblems: [String]

    /// Creates a report.
    public init(documents: Int, attachments: Int = 0, attachmentBytes: Int64 = 0, attachmentProblems: [String] = []) {
        self.documents = documents
        self.attachments = attachments
        self.attachmentBytes = attachmentBytes
        self.attachmentProblems = attachmentProblems
    }
}
