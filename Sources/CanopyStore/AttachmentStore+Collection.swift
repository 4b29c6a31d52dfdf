import CanopyCore
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What a collection of attachment content did (`AttachmentStore.collectGarbage(keeping:)`).
public struct AttachmentGarbageReport: Sendable, Equatable, CustomStringConvertible {
    /// Content files removed: no revision named them and nothing pinned them.
    public var removedFiles: Int
    /// The bytes those files held.
    public var freedBytes: Int64
    /// Content files kept because a revision names them.
    public var namedFiles: Int
    /// Content files no revision names that were kept because they were pinned during the
    /// collection (a write about to name them, a read); a later collection removes them if
    /// nothing names them by then.
    public var pinnedFiles: Int

    /// A report of these counts.
    public init(removedFiles: Int = 0, freedBytes: Int64 = 0, namedFiles: Int = 0, pinnedFiles: Int = 0) {
        self.removedFiles = removedFiles
        self.freedBytes = freedBytes
        self.namedFiles = namedFiles
        self.pinnedFiles = pinnedFiles
    }

    public var description: String {
        "\(removedFiles) attachment files removed (\(freedBytes) bytes), \(namedFiles) named kept, \(pinnedFiles) pinned kept"
    }
}

/// Removing content no revision names.
extension AttachmentStore {
    /// Removes every content file of the directory whose digest is not in the set `named`
    /// returns and was not pinned at any moment of the collection; syncs the directory after
    /// removing. The `partial-` file of a fetch is removed on the same terms (no revision, set
    /// aside ones included, names its digest, and no download holds it). Files whose name is not
    /// a digest (64 lowercase hex digits), `incoming-` files of uploads in progress among them,
    /// are never touched.
    ///
    /// `named` runs after the collection has begun, and must read what the revisions name then
    /// (`DocumentStore.namedAttachmentDigests()`, the union over every store sharing the
    /// directory): that is why it is a function and not a set. A writer pins content before
    /// storing it and releases the pin after its revision committed; so content a revision
    /// committed after `named` read its snapshot was pinned at some moment of the collection and
    /// is kept, and content pinned only after its file was removed is stored again by its writer.
    /// Each file's pin check and unlink happen under the pins' lock.
    public func collectGarbage(
        keeping named: () throws(StoreError) -> Set<AttachmentDigest>
    ) throws(StoreError) -> AttachmentGarbageReport {
        let collection = pins.beginCollection()
        defer { pins.endCollection(collection) }
        let keep = try named()
        var report = AttachmentGarbageReport()
        var failure: StoreError?
        for (name, digest) in try contentFiles() {
            if keep.contains(digest) {
                if !name.hasPrefix(Self.partialPrefix) { report.namedFiles += 1 }
                continue
            }
            let path = directory + "/" + name
            var removed = false
            var size: Int64 = 0
            let unpinned = pins.unlessPinned(digest, collection: collection) {
                var info = stat()
                if stat(path, &info) == 0 { size = Int64(info.st_size) }
                if unlink(path) == 0 {
                    removed = true
                } else if errno != ENOENT, failure == nil {
                    failure = .attachment("removing \(path) failed: \(String(cString: strerror(errno)))")
                }
            }
            if !unpinned {
                report.pinnedFiles += 1
            } else if removed {
                report.removedFiles += 1
                report.freedBytes += size
            }
        }
        if report.removedFiles > 0 { try syncDirectory() }
        if let failure { throw failure }
        return report
    }

    /// The name prefix of content being fetched from a peer (`AttachmentDownload`).
    static let partialPrefix = "partial-"

    /// The content files in the directory, by name, with the digest each name spells: the
    /// content's, or `partial-` and the digest of content being fetched; other names are left
    /// out. Empty when the directory does
    /// not exist (no content was ever stored).
    func contentFiles() throws(StoreError) -> [(name: String, digest: AttachmentDigest)] {
        guard let stream = opendir(directory) else {
            if errno == ENOENT { return [] }
            throw .attachment("cannot list \(directory): \(String(cString: strerror(errno)))")
        }
        defer { closedir(stream) }
        var files: [(name: String, digest: AttachmentDigest)] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
            }
            let hex = name.hasPrefix(Self.partialPrefix) ? String(name.dropFirst(Self.partialPrefix.count)) : name
            guard hex.utf8.count == 2 * AttachmentDigest.byteCount,
                  let digest = AttachmentDigest(AttachmentDigest.prefix + hex), digest.hex == hex else { continue }
            files.append((name, digest))
        }
        return files
    }
}
