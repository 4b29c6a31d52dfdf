import CanopyCore
import Foundation
import Synchronization
import Testing
@testable import CanopyStore

/// Conflicts between revisions whose attachments differ: a resolver sees each leaf's
/// `_attachments` metadata, and the three-way merge merges the map like any other object.
@Suite("conflicts over attachments")
struct AttachmentConflictTests {
    /// `text` stored as attachment content in `store`, as a stub with `revpos`.
    static func stored(_ store: DocumentStore, _ text: String, revpos: Int) throws -> AttachmentMetadata {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("canopy-attachment-\(UUID().uuidString)").path
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let added = try store.attachments.add(contentsOf: path)
        return AttachmentMetadata(contentType: "text/plain", length: added.length, digest: added.digest, revpos: revpos)
    }

    @Test("merge-json keeps the attachments each side added since the common ancestor, and a resolver sees every leaf's stubs")
    func mergeAttachmentMaps() throws {
        let test = try TestStore(.init(conflictPolicy: .manual))
        let store = test.store
        let cover = try Self.stored(store, "cover", revpos: 1)
        let base = Attachments.body(.object(["title": .string("report")]), with: ["cover": cover])
        let first = try store.put(id: "doc", body: base, replacing: nil)
        let local = try store.put(
            id: "doc", body: Attachments.body(.object(["title": .string("report")]), with: ["cover": cover, "local": try Self.stored(store, "mine", revpos: 2)]),
            replacing: first)
        let remoteBody = Attachments.body(.object(["title": .string("report")]), with: ["cover": cover, "remote": try Self.stored(store, "theirs", revpos: 2)])
        let remote = try foreign("doc", parentPath: [first], body: remoteBody)
        #expect(try store.bulkInsertForeign([remote], idCheck: .trusted)[0].resolution == .kept)

        let seen = Mutex<[Set<String>]>([])
        let merged = try store.resolveConflicts(id: "doc", resolver: ClosureResolver { conflict in
            seen.withLock { $0 = conflict.leaves.map { Set(((try? Attachments.metadata(in: $0.body ?? .null)) ?? [:]).keys) } }
            return try BuiltInResolver.mergeJSON.resolve(conflict)
        })
        #expect(Set(seen.withLock { $0 }) == [["cover", "local"], ["cover", "remote"]])
        let names = try Attachments.metadata(in: try store.get(id: "doc").body)
        #expect(Set(names.keys) == ["cover", "local", "remote"])
        #expect(try store.get(id: "doc").revision == merged && merged != local)
    }
}
