import CanopyCore

/// Reading documents.
extension DocumentStore {
    /// The sequence of `id`'s latest change, or nil when the document does not exist.
    package func sequence(of id: String) throws(StoreError) -> Int64? {
        try read { db in try db.scalarInt("SELECT sequence FROM documents WHERE doc_id = ?", .text(id)) }
    }

    /// The current revision of `id` (deleted documents included: check `isDeleted`).
    /// Throws `StoreError.notFound` when the document does not exist.
    public func get(id: String, options: GetOptions = []) throws(StoreError) -> Document {
        try read { db in
            guard let document = try RevisionRows.load(db, documentID: id), let current = document.tree.current else {
                throw StoreError.notFound(documentID: id, revision: nil)
            }
            return try Self.makeDocument(db, document, revision: current.id, options: options)
        }
    }

    /// A specific revision of `id`. Throws `notFound` when the tree does not hold it and
    /// `bodyUnavailable` when its body was dropped by compaction.
    public func get(id: String, rev: RevisionID, options: GetOptions = []) throws(StoreError) -> Document {
        try read { db in
            guard let document = try RevisionRows.load(db, documentID: id) else {
                throw StoreError.notFound(documentID: id, revision: rev)
            }
            return try Self.makeDocument(db, document, revision: rev, options: options)
        }
    }

    /// The revision tree of `id` as stored (for replication, export and tests), or nil.
    public func revisionTree(id: String) throws(StoreError) -> RevTree? {
        try read { db in try RevisionRows.load(db, documentID: id)?.tree }
    }
}
