import CanopyCore
import CanopyStore

/// Local documents: JSON objects kept by id in the database file that never replicate, never
/// appear in the changes feed and have no revisions (CouchDB's `_local` documents): settings,
/// an application's own checkpoints. A save replaces the body; bodies are `JSONValue`s
/// (`JSONValue.parse`, or a document's `body`). Ids follow the document id rule
/// (1 to 1024 UTF-8 bytes); a body is a JSON object of at most 1 MiB in canonical JSON. The
/// replication engine keeps its checkpoints here under ids starting `checkpoint/` and
/// `peer-checkpoint/`: an application leaves those alone. `canopyctl put _local/NAME` writes the
/// local document whose id is `_local/NAME`.
extension Database {
    /// The local document `id` as JSON; nil when there is none.
    public func localDocument(id: String) throws(DatabaseError) -> JSONValue? {
        do { return try store.localGet(id) } catch { throw DatabaseError(error, documentID: id) }
    }

    /// Stores `json` (a JSON object) as the local document `id`, replacing any previous body.
    public func saveLocal(json: JSONValue, id: String) throws(DatabaseError) {
        do { try store.localPut(id, body: json) } catch { throw DatabaseError(error, documentID: id) }
    }

    /// Removes the local document `id`; returns whether there was one.
    @discardableResult
    public func deleteLocal(id: String) throws(DatabaseError) -> Bool {
        do { return try store.localDelete(id) } catch { throw DatabaseError(error, documentID: id) }
    }
}
