import CanopyCore
import Foundation

/// Damage a store found in its own file while reading it: a document id that is not valid UTF-8,
/// a leaf list this build did not write, a stored body that no longer matches its revision id.
/// The damaged document or revision is left out of what the read returns (it is never sent to a
/// peer, never substituted with something readable) and reported once per process through the
/// store's damage handler (`DocumentStore.setDamageHandler(_:)`).
public struct StoredDamage: Sendable, Equatable {
    /// The document's id for people to read: as stored when it is valid UTF-8, else with U+FFFD
    /// for the damaged bytes (the reason then lists the stored bytes). Never use it as an id.
    public let documentID: String
    /// The damaged revision, when the damage is in one revision.
    public let revision: RevisionID?
    /// What is wrong, in words.
    public let reason: String

    /// A report of damage.
    public init(documentID: String, revision: RevisionID?, reason: String) {
        self.documentID = documentID
        self.revision = revision
        self.reason = reason
    }

    /// The damage of a stored document id that is not valid UTF-8.
    static func invalidID(_ bytes: [UInt8]) -> StoredDamage {
        let shown = Hex.encode(bytes.prefix(64))
        return StoredDamage(
            documentID: String(decoding: bytes.prefix(StoreLimits.documentIDBytesMax), as: UTF8.self), revision: nil,
            reason: "the stored document id is not valid UTF-8 (bytes \(shown)\(bytes.count > 64 ? " …" : ""))")
    }
}

/// The damage one store found, each document (and revision) reported once per process.
final class DamageLedger: @unchecked Sendable {
    private struct Key: Hashable {
        let documentID: String
        let revision: RevisionID?
    }

    private let lock = NSLock()
    private var seen: Set<Key> = []
    private var handler: (@Sendable (StoredDamage) -> Void)?

    /// Damaged documents and revisions found since the store was opened.
    var count: Int {
        lock.withLock { seen.count }
    }

    func setHandler(_ handler: @escaping @Sendable (StoredDamage) -> Void) {
        lock.withLock { self.handler = handler }
    }

    /// Records `damage`; the handler hears of it the first time only. Called on the reading
    /// thread; the handler runs outside the ledger's lock.
    func report(_ damage: StoredDamage) {
        let handler: (@Sendable (StoredDamage) -> Void)? = lock.withLock {
            seen.insert(Key(documentID: damage.documentID, revision: damage.revision)).inserted ? self.handler : nil
        }
        handler?(damage)
    }
}

extension DocumentStore {
    /// Calls `handler` the first time a read finds damage in the store's file (`StoredDamage`),
    /// on the reading thread, possibly while the store's lock is held: the handler must be quick
    /// (hop to a queue) and must not call back into the store. Replaces an earlier handler.
    public func setDamageHandler(_ handler: @escaping @Sendable (StoredDamage) -> Void) {
        damage.setHandler(handler)
    }

    /// Damaged documents and revisions reads have found since the store was opened.
    public var damagedCount: Int { damage.count }

    /// Reports attachment content `digest` that was found not to hash to its digest as it was
    /// read (for a peer, a download): as damage of the first document, in change order, with a
    /// stored revision that names it (the revision is the one given), else of the content
    /// alone (its id `attachment DIGEST`). Once per document and revision, as other damage.
    public func reportDamagedContent(_ digest: AttachmentDigest) {
        let namer = try? readSnapshot { db in
            try db.queryFirst(
                """
                SELECT d.doc_id, r.generation, r.digest FROM documents d JOIN revisions r ON r.doc_key = d.doc_key
                WHERE r.body IS NOT NULL AND instr(r.body, CAST(? AS BLOB)) > 0 ORDER BY d.sequence LIMIT 1
                """, [.text(digest.description)]
            ) { row in (row.validText(0), row.revisionID(generation: row.int(1), digestColumn: 2)) }
        }
        let reason = "attachment content \(digest) is damaged on this node: it does not hash to its digest"
        if case let (id?, revision)?? = namer {
            damage.report(StoredDamage(documentID: id, revision: revision, reason: reason))
        } else {
            damage.report(StoredDamage(documentID: "attachment \(digest)", revision: nil, reason: reason))
        }
    }

    /// Reports damage the caller found in what this store read (a leaf the row lists that the
    /// revisions cannot give), as a read that finds damage does: once per document and revision.
    public func reportDamage(_ found: StoredDamage) {
        damage.report(found)
    }
}

extension DocumentStore {
    /// The document ids `sql` selects (its one column), leaving out and reporting those whose
    /// stored bytes are not valid UTF-8.
    func readableIDs(_ db: Database, _ sql: String) throws -> [String] {
        var damaged: [StoredDamage] = []
        let ids = try db.query(sql) { row -> String? in
            if let id = row.validText(0) { return id }
            damaged.append(.invalidID(row.textBytes(0)))
            return nil
        }
        for report in damaged { damage.report(report) }
        return ids.compactMap { $0 }
    }
}
