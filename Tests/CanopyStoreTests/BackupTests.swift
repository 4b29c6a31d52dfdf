import CanopyCore
import Foundation
import Testing
@testable import CanopyStore

@Suite("backups of a store and the attachment content it names")
struct BackupTests {
    /// A new directory for a backup beside the test's store, and the attachment store inside it.
    static func backupDirectory(in test: TestStore) throws -> (path: String, attachments: AttachmentStore) {
        let target = test.directory.path("backup")
        try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: false)
        return (target, AttachmentStore(directory: target + "/attachments"))
    }

    @Test("a backup holds the documents and the content its revisions name, opens as a store that reads both, and leaves out content no kept body names")
    func contentTravelsWithTheSnapshot() throws {
        let test = try TestStore()
        let store = test.store
        let kept = [UInt8]((0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 13) })
        let keptDigest = try storedUnpinned(kept, in: store.attachments)
        try store.put(id: "report", body: naming(keptDigest, of: kept), replacing: nil)
        // Content named once by a revision whose body compaction drops: not needed, not copied.
        let dropped = [UInt8](repeating: 9, count: 700)
        let droppedDigest = try storedUnpinned(dropped, in: store.attachments)
        let first = try store.put(id: "draft", body: naming(droppedDigest, of: dropped), replacing: nil)
        try store.put(id: "draft", body: body(2), replacing: first)
        _ = try store.compact()

        let (target, copied) = try Self.backupDirectory(in: test)
        let result = try store.backup(to: target + "/store.sqlite", attachmentsTo: copied)
        #expect(result.documents == 2 && result.attachmentFiles == 1 && result.attachmentBytes == Int64(kept.count), "\(result)")
        #expect(result.attachmentProblems.isEmpty)
        #expect(copied.contains(keptDigest, length: Int64(kept.count)) && !copied.contains(droppedDigest))

        let restored = try DocumentStore(
            path: target + "/store.sqlite", configuration: .init(attachmentsDirectory: target + "/attachments"))
        #expect(try restored.get(id: "report").revision == store.get(id: "report").revision)
        #expect(try restored.attachmentPart(of: keptDigest, offset: 0, maxBytes: 1 << 20)?.bytes == kept)
    }

    @Test("content damaged in the store's directory is reported, not copied; the rest of the backup is written")
    func damagedContentIsReported() throws {
        let test = try TestStore()
        let store = test.store
        let bytes = [UInt8]((0..<4000).map { UInt8(truncatingIfNeeded: $0 &* 5) })
        let digest = try storedUnpinned(bytes, in: store.attachments)
        try store.put(id: "scan", body: naming(digest, of: bytes), replacing: nil)
        var damaged = bytes
        damaged[2000] ^= 0xFF
        try Data(damaged).write(to: URL(fileURLWithPath: store.attachments.path(of: digest)))

        let (target, copied) = try Self.backupDirectory(in: test)
        let result = try store.backup(to: target + "/store.sqlite", attachmentsTo: copied)
        #expect(result.documents == 1 && result.attachmentFiles == 0)
        #expect(result.attachmentProblems.count == 1 && result.attachmentProblems[0].hasPrefix("\(digest): "), "\(result.attachmentProblems)")
        #expect(!copied.contains(digest))
        #expect(FileManager.default.fileExists(atPath: target + "/store.sqlite"))
    }
}
