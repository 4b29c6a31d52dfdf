import CanopyCore
import Foundation
import Testing
@testable import CanopyStore

@Suite("CouchDB JSON interop")
struct CouchJSONTests {
    /// A store holding a plain document, a deleted one, a resolved conflict (closing tombstone and
    /// resolution output) and a kept conflict.
    private func populatedStore() throws -> DocumentStore {
        let store = try TestStore(.init(conflictPolicy: .manual)).store
        let plain1 = try store.put(id: "plain", body: body(1), replacing: nil)
        try store.put(id: "plain", body: body(2), replacing: plain1)
        try store.delete(id: "gone", rev: try store.put(id: "gone", body: body(1), replacing: nil))
        let base = try store.put(id: "resolved", body: .object(["a": .int(0), "b": .int(0)]), replacing: nil)
        try store.put(id: "resolved", body: .object(["a": .int(1), "b": .int(0)]), replacing: base)
        try store.bulkInsertForeign([try foreign("resolved", parentPath: [base], body: .object(["a": .int(0), "b": .int(1)]))])
        try store.resolveConflicts(id: "resolved", resolver: BuiltInResolver.mergeJSON)
        let kept = try store.put(id: "kept", body: body(1), replacing: nil)
        try store.put(id: "kept", body: body(2, "local"), replacing: kept)
        try store.bulkInsertForeign([try foreign("kept", parentPath: [kept], body: body(2, "remote"))])
        return store
    }

    @Test("a document exports in CouchDB shape with _rev, _revisions, _deleted and _conflicts")
    func exportShape() throws {
        let store = try populatedStore()
        let kept = try store.get(id: "kept", options: [.revisions, .conflicts])
        let exported = try store.exportCouchDocument(id: "kept")
        let members = try #require(exported.objectValue)
        #expect(members["_id"] == .string("kept"))
        #expect(members["_rev"] == .string(kept.revision.description))
        #expect(members["_revisions"] == .object([
            "start": .int(2), "ids": .array((kept.history ?? []).map { .string($0.digestHex) }),
        ]))
        #expect(members["_conflicts"] == .array((kept.conflicts ?? []).map { .string($0.description) }))
        #expect(members["n"] == .int(2))
        let gone = try #require(try store.exportCouchDocument(id: "gone").objectValue)
        #expect(gone["_deleted"] == .bool(true))
    }

    @Test("an exported _bulk_docs body imports into another store as the same trees")
    func roundTrip() throws {
        let source = try populatedStore()
        let exported = try source.exportBulkDocs()
        let text = String(decoding: exported, as: UTF8.self)
        #expect(text.contains("\"_closed\":true"))
        #expect(text.contains("\"new_edits\":false"))
        let target = try TestStore(.init(conflictPolicy: .manual)).store
        try target.importBulkDocs(exported)
        for change in try source.changes(since: 0) {
            let id = change.documentID
            let expected = try #require(try source.revisionTree(id: id))
            let actual = try #require(try target.revisionTree(id: id))
            #expect(actual.leaves == expected.leaves, "leaves of \(id)")
            #expect(Set(actual.sortedNodes.map(\.id)) == Set(expected.sortedNodes.map(\.id)), "revisions of \(id)")
            #expect(try target.get(id: id).body == source.get(id: id).body)
        }
        #expect(try target.conflictedDocumentIDs() == ["kept"])
        #expect(try target.changes(since: 0).count == 4)
    }

    /// A document as CouchDB holds it after a conflict was settled CouchDB's way: the loser ended
    /// by an ordinary deletion (MD5-style ids, which are not Canopy content hashes).
    private let couchExport = """
        {"new_edits": false, "docs": [
          {"_id": "settled", "_rev": "3-0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a", "color": "blue",
           "_revisions": {"start": 3, "ids": ["0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a", "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b",
                                               "0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c"]}},
          {"_id": "settled", "_rev": "3-0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d", "_deleted": true,
           "_revisions": {"start": 3, "ids": ["0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d", "0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e",
                                               "0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c"]}}
        ]}
        """

    @Test("--couchdb import closes CouchDB's deleted losers so the document reads as CouchDB showed it")
    func couchDBModeImport() throws {
        let store = try TestStore().store
        let results = try store.importBulkDocs(Array(couchExport.utf8), couchDB: true)
        #expect(results.map(\.resolution) == [.notConflicted])
        let document = try store.get(id: "settled")
        #expect(!document.isDeleted)
        #expect(document.body == .object(["color": .string("blue")]))
        let loser = try #require(RevisionID("3-0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d"))
        #expect(try store.revisionTree(id: "settled")?.node(loser)?.kind == .closed)
    }

    @Test("without --couchdb the same data is a conflict that deletes-win settles")
    func plainImportDeletesWin() throws {
        let store = try TestStore().store
        let results = try store.importBulkDocs(Array(couchExport.utf8))
        #expect(results.map(\.resolution) == [.resolved])
        #expect(try store.get(id: "settled").isDeleted)
    }

    @Test("bad _bulk_docs input is refused with a typed error naming the document, nothing written")
    func badImports() throws {
        let store = try TestStore().store
        let good = #"{"_id":"ok","_rev":"1-0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a"}"#
        let cases: [(String, (StoreInputError) -> Bool)] = [
            (#"{"docs": [], "new_edits": true}"#, { if case .invalidCouchDocument = $0 { true } else { false } }),
            (#"{"docs": [ }"#, { if case .invalidJSON = $0 { true } else { false } }),
            (#"{"new_edits":false,"docs":[\#(good),{"_id":"x","_rev":"2-zz"}]}"#, { $0 == .malformedRevisionID(documentID: "x", text: "2-zz") }),
            (#"{"new_edits":false,"docs":[\#(good),{"_id":"","_rev":"1-0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a"}]}"#, { $0 == .emptyDocumentID }),
            (#"{"new_edits":false,"docs":[\#(good),7]}"#, { $0 == .bodyNotObject(documentID: nil) }),
            (#"{"new_edits":false,"docs":[\#(good),{"_id":"g","_rev":"3-0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a","_revisions":{"start":2,"ids":["0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a"]}}]}"#,
             { if case .invalidHistory(documentID: "g", _) = $0 { true } else { false } }),
            (#"{"new_edits":false,"docs":[\#(good),{"_id":"h","_rev":"2-0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a","_revisions":{"start":2,"ids":["0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b"]}}]}"#,
             { if case .invalidHistory(documentID: "h", _) = $0 { true } else { false } }),
            (#"{"new_edits":false,"docs":[\#(good),{"_id":"a","_rev":"1-0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a","_attachments":{"x":7}}]}"#,
             { if case .invalidAttachments(documentID: "a", _) = $0 { true } else { false } }),
            (#"{"new_edits":false,"docs":[\#(good),{"_id":"b","_rev":"1-0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a","_attachments":{"x":{"data":"not base64!"}}}]}"#,
             { if case .invalidAttachments(documentID: "b", _) = $0 { true } else { false } }),
            (#"{"new_edits":false,"docs":[\#(good),{"_id":"c","_rev":"1-0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a","_attachments":{"x":{"data":"aGk=","length":3}}}]}"#,
             { if case .invalidAttachments(documentID: "c", _) = $0 { true } else { false } }),
            (#"{"new_edits":false,"docs":[\#(good),{"_id":"d","_rev":"1-0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a","_attachments":{"x":{"data":"aGk=","encoding":"gzip"}}}]}"#,
             { if case .invalidAttachments(documentID: "d", _) = $0 { true } else { false } }),
        ]
        for (text, check) in cases {
            do {
                try store.importBulkDocs(Array(text.utf8))
                Issue.record("accepted: \(text)")
            } catch {
                guard case .invalidInput(let input) = error, check(input) else { Issue.record("\(error) for \(text)"); continue }
            }
        }
        #expect(try store.documentCount == 0)
    }
}
