import Canopy
import Foundation
import Testing

/// A database in its own temporary directory, kept alive with it.
struct TestDatabase {
    let directory = TemporaryDirectory()
    let db: Database

    init(_ configuration: Database.Configuration = .init()) throws {
        db = try Database(path: directory.path("db.sqlite"), configuration: configuration)
    }
}

/// Saves note "n" titled "a", then "b" on top of it: the first revision is then stale.
func twoEdits(_ db: Database) throws -> (first: RevisionID, second: RevisionID) {
    let first = try db.save(Note(title: "a", text: ""), id: "n")
    return (first, try db.save(Note(title: "b", text: ""), id: "n", replacing: first))
}

@Suite("Database: Codable documents with optimistic concurrency")
struct DatabaseDocumentTests {
    @Test("a saved Codable value reads back equal, and as raw JSON with its revision")
    func saveAndRead() throws {
        let db = try TestDatabase().db
        let note = Note(title: "Groceries", text: "milk")
        let revision = try db.save(note, id: "note:1")
        #expect(try db.document(id: "note:1", as: Note.self) == note)
        let document = try #require(try db.document(id: "note:1"))
        #expect(document.revision == revision)
        #expect(document.body == .object(["title": .string("Groceries"), "text": .string("milk")]))
        #expect(try document.value(as: Note.self) == note)
        #expect(try db.document(id: "nothing", as: Note.self) == nil)
        #expect(try db.document(id: "nothing") == nil)
    }

    @Test("raw JSON saves and reads back")
    func rawJSON() throws {
        let db = try TestDatabase().db
        let body = try JSONValue.parse(#"{"title": "t", "text": "x"}"#)
        let revision = try db.save(json: body, id: "n")
        #expect(try db.document(id: "n")?.body == body)
        #expect(try db.document(id: "n", as: Note.self) == Note(title: "t", text: "x"))
        #expect(revision == RevisionHasher.revisionID(parent: nil, kind: .live, body: body))
    }

    @Test("a save based on a stale revision fails with a conflict naming the current revision")
    func staleSave() throws {
        let db = try TestDatabase().db
        let (first, second) = try twoEdits(db)
        #expect(throws: DatabaseError.conflict(documentID: "n", replacing: first, current: second)) {
            try db.save(Note(title: "c", text: ""), id: "n", replacing: first)
        }
        #expect(throws: DatabaseError.conflict(documentID: "n", replacing: nil, current: second)) {
            try db.save(Note(title: "c", text: ""), id: "n")
        }
        #expect(try db.document(id: "n", as: Note.self)?.title == "b")
        let error = DatabaseError.conflict(documentID: "n", replacing: first, current: second)
        #expect(error.description.contains("\"n\"") && error.description.contains("\(second)"))
    }

    @Test("last write wins saves on top of the current revision")
    func lastWriteWins() throws {
        let db = try TestDatabase().db
        let (first, second) = try twoEdits(db)
        let third = try db.save(Note(title: "c", text: ""), id: "n", replacing: first, concurrency: .lastWriteWins)
        #expect(third.generation == 3)
        #expect(try db.document(id: "n")?.revision == third)
        #expect(try db.document(id: "n", as: Note.self)?.title == "c")
        #expect(try db.conflictedDocumentIDs().isEmpty)
        #expect(try db.document(id: "n")?.revision != second)
    }

    @Test("a conflict handler merges the proposed value with the current one, field by field")
    func conflictHandlerMerges() throws {
        let db = try TestDatabase().db
        let first = try db.save(Note(title: "Groceries", text: "milk"), id: "n")
        try db.save(Note(title: "Groceries", text: "milk, eggs"), id: "n", replacing: first)
        let merged = try db.save(Note(title: "Shopping", text: "milk"), id: "n", replacing: first) { mine, theirs in
            #expect(mine == Note(title: "Shopping", text: "milk"))
            #expect(theirs == Note(title: "Groceries", text: "milk, eggs"))
            return Note(title: mine.title, text: theirs?.text ?? mine.text)
        }
        #expect(merged.generation == 3)
        #expect(try db.document(id: "n", as: Note.self) == Note(title: "Shopping", text: "milk, eggs"))
    }

    @Test("a conflict handler that gives up leaves a conflict error; one that throws, a handler error")
    func conflictHandlerGivesUp() throws {
        struct Refused: Error {}
        let db = try TestDatabase().db
        let (first, second) = try twoEdits(db)
        #expect(throws: DatabaseError.conflict(documentID: "n", replacing: first, current: second)) {
            try db.save(Note(title: "c", text: ""), id: "n", replacing: first) { _, _ in nil }
        }
        do {
            try db.save(Note(title: "c", text: ""), id: "n", replacing: first) { _, _ in throw Refused() }
            Issue.record("the save succeeded")
        } catch .handlerFailed(let id, let detail) {
            #expect(id == "n" && detail.contains("Refused"))
        } catch {
            Issue.record("unexpected \(error)")
        }
        #expect(try db.document(id: "n")?.revision == second)
    }

    @Test("a stale delete fails, a last-write-wins delete deletes, and a save re-creates the document")
    func deleteWithConcurrency() throws {
        let db = try TestDatabase().db
        let (first, second) = try twoEdits(db)
        #expect(throws: DatabaseError.conflict(documentID: "n", replacing: first, current: second)) {
            try db.delete(id: "n", revision: first)
        }
        #expect(try db.document(id: "n") != nil)
        let deletion = try db.delete(id: "n", revision: first, concurrency: .lastWriteWins)
        #expect(deletion.generation == 3)
        #expect(try db.document(id: "n") == nil)
        #expect(try db.document(id: "n", as: Note.self) == nil)
        let again = try db.save(Note(title: "c", text: ""), id: "n")
        #expect(again.generation == 4)
        #expect(try db.document(id: "n", as: Note.self)?.title == "c")
    }

    @Test("deleting a document that does not exist says it is not found")
    func deleteMissing() throws {
        let db = try TestDatabase().db
        let revision = RevisionHasher.revisionID(parent: nil, kind: .live, body: .emptyObject)
        #expect(throws: DatabaseError.notFound(documentID: "ghost", revision: revision)) {
            try db.delete(id: "ghost", revision: revision)
        }
    }

    @Test("a value that is not a JSON object is refused with the store's reason")
    func invalidDocument() throws {
        let db = try TestDatabase().db
        do {
            try db.save([1, 2, 3], id: "list")
            Issue.record("an array was saved")
        } catch .invalidDocument(let id, let reason) {
            #expect(id == "list")
            #expect(reason.contains("not a JSON object"), "\(reason)")
        } catch {
            Issue.record("unexpected \(error)")
        }
        #expect(throws: DatabaseError.self) { try db.save(Note(title: "", text: ""), id: "") }
    }

    @Test("a value that cannot be encoded fails with the encoder's description")
    func encodingFailure() throws {
        let db = try TestDatabase().db
        do {
            try db.save(["x": Double.nan], id: "nan")
            Issue.record("NaN was saved")
        } catch .encodingFailed(let id, let detail) {
            #expect(id == "nan" && !detail.isEmpty)
        } catch {
            Issue.record("unexpected \(error)")
        }
    }

    @Test("reading a document as a type it does not fit fails with the decoder's description")
    func decodingFailure() throws {
        struct Counter: Codable { var count: Int }
        let db = try TestDatabase().db
        let revision = try db.save(Note(title: "a", text: "b"), id: "n")
        do {
            _ = try db.document(id: "n", as: Counter.self)
            Issue.record("a note decoded as a counter")
        } catch .decodingFailed(let id, let failed, let detail) {
            #expect(id == "n" && failed == revision)
            #expect(detail.contains("count"), "\(detail)")
        } catch {
            Issue.record("unexpected \(error)")
        }
    }

    @Test("the configuration reaches the store, and a revsLimit out of range is refused")
    func configuration() throws {
        let opened = try TestDatabase(.init(conflictResolution: .manual, durable: true, revsLimit: 50))
        #expect(opened.db.store.revsLimit == 50)
        #expect(try opened.db.store.synchronousMode == 2)
        if case .manual = opened.db.conflictResolution {} else { Issue.record("policy is not manual") }
        opened.db.conflictResolution = .automatic
        if case .automatic = opened.db.store.conflictPolicy {} else { Issue.record("policy is not automatic") }
        let directory = TemporaryDirectory()
        #expect(throws: DatabaseError.self) {
            try Database(path: directory.path("db.sqlite"), configuration: .init(revsLimit: 1))
        }
    }
}
