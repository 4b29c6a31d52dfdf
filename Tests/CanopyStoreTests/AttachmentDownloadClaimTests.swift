import CanopyCore
import Foundation
import Testing
@testable import CanopyStore

/// One partial file, one writer: while a download of the process fetches some content, no other
/// download of the same directory begins on it, through the same store or another.
@Suite("Attachment download claims")
struct AttachmentDownloadClaimTests {
    @Test("a second download of the same content waits for the first to be released; other content is not held")
    func oneWriterPerContent() throws {
        let temporary = TemporaryDirectory()
        let directory = temporary.path("content")
        let first = AttachmentStore(directory: directory)
        let second = AttachmentStore(directory: directory)
        let digest = AttachmentDigest(bytes: [UInt8](repeating: 1, count: AttachmentDigest.byteCount))
        let other = AttachmentDigest(bytes: [UInt8](repeating: 2, count: AttachmentDigest.byteCount))

        var download: AttachmentDownload? = try first.beginDownload(digest, length: 1000)
        try [UInt8](repeating: 9, count: 400).withUnsafeBytes { try download?.append($0) }
        #expect(try second.beginDownloadUnlessFetching(digest, length: 1000) == nil, "another store of the directory sees the claim")
        #expect(throws: StoreError.self) { try first.beginDownload(digest, length: 1000) }
        #expect(try second.beginDownloadUnlessFetching(other, length: 10) != nil, "other content is not held")

        download = nil
        let resumed = try #require(try second.beginDownloadUnlessFetching(digest, length: 1000))
        #expect(resumed.received == 400, "the next download resumes from the first one's bytes")
    }

    @Test("a download that cannot open gives its claim back")
    func failedOpenReleases() throws {
        let temporary = TemporaryDirectory()
        let directory = temporary.path("content")
        let store = AttachmentStore(directory: directory, sizeLimit: 100)
        let digest = AttachmentDigest(bytes: [UInt8](repeating: 3, count: AttachmentDigest.byteCount))
        #expect(throws: StoreError.self) { try store.beginDownload(digest, length: 1000) }
        let big = AttachmentStore(directory: directory)
        #expect(try big.beginDownloadUnlessFetching(digest, length: 1000) != nil)
    }
}
