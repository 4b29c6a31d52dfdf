import CanopyCore
import Foundation
import Testing
@testable import CanopyStore

#if canImport(Glibc)
import Glibc
#endif

/// A large download goes to the disk while it arrives, and what is already on the disk leaves the
/// page cache, so a download holds a bounded amount of the machine's memory whatever its size.
@Suite("Attachment download write-back")
struct AttachmentDownloadWritebackTests {
    @Test("a 40 MiB download is stored whole, and its first range is out of the page cache once two more follow it")
    func largeDownload() throws {
        let temporary = TemporaryDirectory()
        let directory = temporary.path("content")
        let store = AttachmentStore(directory: directory)
        let range = Int(AttachmentDownload.writebackBytes)
        var generator = SplitMix64(seed: 40)
        var content = [UInt8](repeating: 0, count: 5 * range + 12_345)
        content.withUnsafeMutableBytes { raw in
            for offset in stride(from: 0, to: raw.count - 7, by: 8) { raw.storeBytes(of: generator.next(), toByteOffset: offset, as: UInt64.self) }
        }
        let hash = Blake2bStream(outputBytes: AttachmentDigest.byteCount)
        hash.update(content)
        let digest = AttachmentDigest(bytes: hash.finish())

        let download = try store.beginDownload(digest, length: Int64(content.count))
        func append(upTo end: Int) throws {
            try content.withUnsafeBytes { raw in
                for start in stride(from: Int(download.received), to: end, by: AttachmentStore.partBytes) {
                    try download.append(UnsafeRawBufferPointer(rebasing: raw[start..<min(start + AttachmentStore.partBytes, end)]))
                }
            }
        }
        try append(upTo: 3 * range)
        // Where the file system cannot drop pages (tmpfs keeps files in them), only the content is checked.
        if try Self.dropsWrittenPages(directory) {
            let resident = try Self.residentPages(of: directory + "/partial-" + digest.hex, bytes: range)
            #expect(resident == 0, "\(resident) pages of the first range still cached after two more ranges")
        }
        try append(upTo: content.count)
        try download.verify()
        try store.publish([digest])
        #expect(FileManager.default.contents(atPath: store.path(of: digest)) == Data(content))
    }

    /// Pages of the first `bytes` of the file at `path` that are in the page cache (`mincore`).
    static func residentPages(of path: String, bytes: Int) throws -> Int {
        let file = open(path, O_RDONLY | O_CLOEXEC)
        guard file >= 0 else { throw POSIXError(.ENOENT) }
        defer { close(file) }
        guard let mapped = mmap(nil, bytes, PROT_READ, MAP_SHARED, file, 0), mapped != MAP_FAILED else { throw POSIXError(.ENOMEM) }
        defer { munmap(mapped, bytes) }
        let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))
        var vector = [UInt8](repeating: 0, count: (bytes + pageSize - 1) / pageSize)
        guard mincore(mapped, bytes, &vector) == 0 else { throw POSIXError(.EINVAL) }
        return vector.filter { $0 & 1 != 0 }.count
    }

    /// True when a synced file's pages leave the page cache when advised to (not on tmpfs).
    static func dropsWrittenPages(_ directory: String) throws -> Bool {
        let path = directory + "/probe"
        defer { unlink(path) }
        let file = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard file >= 0 else { throw POSIXError(.EACCES) }
        let page = [UInt8](repeating: 7, count: 1 << 16)
        _ = page.withUnsafeBytes { write(file, $0.baseAddress, $0.count) }
        fsync(file)
        _ = posix_fadvise(file, 0, 0, Int32(POSIX_FADV_DONTNEED))
        close(file)
        return try residentPages(of: path, bytes: page.count) == 0
    }
}
