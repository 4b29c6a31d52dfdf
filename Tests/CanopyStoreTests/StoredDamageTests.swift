import CanopyCore
import Foundation
import Testing
@testable import CanopyStore

/// Damage in the file (a flipped byte in an id or a body) is left out of what reads return,
/// never substituted, and reported once through the damage handler.
@Suite("Stored damage")
struct StoredDamageTests {
    /// Collects what the damage handler hears.
    final class Heard: @unchecked Sendable {
        private let lock = NSLock()
        private var reports: [StoredDamage] = []
        var all: [StoredDamage] { lock.withLock { reports } }
        func add(_ damage: StoredDamage) { lock.withLock { reports.append(damage) } }
    }

    @Test("a page of the changes feed passes over a damaged id and leaf list, and still says where it ended")
    func changesPagePassesOverDamage() throws {
        let test = try TestStore()
        let heard = Heard()
        test.store.setDamageHandler { heard.add($0) }
        for n in 0..<6 { _ = try test.store.put(id: "doc-\(n)", body: body(n), replacing: nil) }
        let raw = try Database(path: test.path)
        try raw.run("UPDATE documents SET doc_id = CAST(? AS TEXT) WHERE doc_id = 'doc-1'", .blob(Array("doc-".utf8) + [0xC3]))
        try raw.run("UPDATE documents SET leaves = ? WHERE doc_id = 'doc-5'", .blob([1, 2, 3]))

        let first = try test.store.changesPage(since: 0, limit: 3)
        #expect(first.changes.map(\.documentID) == ["doc-0", "doc-2"])
        #expect(first.lastSequence == 3 && !first.reachedEnd)
        #expect(first.damaged.map(\.reason).allSatisfy { $0.contains("not valid UTF-8") && $0.contains("646f632dc3") })
        let second = try test.store.changesPage(since: first.lastSequence!, limit: 4)
        #expect(second.changes.map(\.documentID) == ["doc-3", "doc-4"])
        #expect(second.lastSequence == 6 && second.reachedEnd)
        #expect(second.damaged.map(\.documentID) == ["doc-5"])
        // Read again: the same damage is reported once.
        _ = try test.store.changesPage(since: 0, limit: 100)
        #expect(heard.all.count == 2 && test.store.damagedCount == 2)
        #expect(heard.all.contains { $0.documentID == "doc-\u{FFFD}" && $0.revision == nil })
    }

    @Test("a body that no longer matches its revision id is never sent and never read back")
    func damagedBodyIsNotSent() throws {
        let test = try TestStore()
        let heard = Heard()
        test.store.setDamageHandler { heard.add($0) }
        let good = try test.store.put(id: "good", body: body(1), replacing: nil)
        let bad = try test.store.put(id: "bad", body: body(2), replacing: nil)
        let raw = try Database(path: test.path)
        try raw.run("UPDATE revisions SET body = ? WHERE body = ?", .blob(CanonicalJSON.encode(body(3))), .blob(CanonicalJSON.encode(body(2))))

        let request = { (id: String, rev: RevisionID) in RevisionRequest(documentID: id, revisions: [rev], knownAncestors: []) }
        #expect(try test.store.revisionsToSend([request("good", good)]).count == 1)
        #expect(throws: StoreError.self) { try test.store.revisionsToSend([request("bad", bad)]) }
        #expect(throws: StoreError.self) { try test.store.get(id: "bad") }
        #expect(heard.all.map(\.documentID) == ["bad"])
        #expect(heard.all.first?.revision == bad)
        #expect(heard.all.first?.reason.contains("no longer matches") == true)
    }

    @Test("a conflicted document whose id is damaged is left out of the conflicts list and the retry pass")
    func conflictListPassesOverDamagedIDs() throws {
        let test = try TestStore(.init(conflictPolicy: .manual))
        let heard = Heard()
        test.store.setDamageHandler { heard.add($0) }
        for id in ["c1", "c2"] {
            _ = try test.store.put(id: id, body: body(1), replacing: nil)
            _ = try test.store.bulkInsertForeign([try foreign(id, body: body(2))])
        }
        try Database(path: test.path).run("UPDATE documents SET doc_id = CAST(? AS TEXT) WHERE doc_id = 'c1'", .blob([0x63, 0xFF]))
        #expect(try test.store.conflictedDocumentIDs() == ["c2"])
        #expect(try test.store.retryConflictResolution().map(\.documentID) == ["c2"])
        #expect(heard.all.count == 1 && heard.all.first?.reason.contains("63ff") == true)
    }
}
