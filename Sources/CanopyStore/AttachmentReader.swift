import CanopyCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Stored attachment content read a part at a time, for a reader that paces itself (a socket
/// that takes a part, then asks for the next). The content is checked against its digest as it
/// is read, and the check is made before the last part is handed out: a reader of damaged
/// content never receives the whole length, so it cannot mistake it for good content.
///
/// Used from one thread at a time. The content is pinned (kept by a collection) and its file
/// open until the reader is released.
public final class AttachmentReader {
    /// The content's digest.
    public let digest: AttachmentDigest
    /// The content's length in bytes.
    public let length: Int64
    private let input: Int32
    private let hash = Blake2bStream(outputBytes: AttachmentDigest.byteCount)
    private var read: Int64 = 0
    private var buffer: [UInt8]
    /// Held while the reader lives: a collection leaves the content alone.
    private let pin: AttachmentPin

    /// Opens the content named `digest` in `store`, which must have `length` bytes.
    public init(_ store: AttachmentStore, digest: AttachmentDigest, length: Int64, partBytes: Int = 1 << 20) throws(StoreError) {
        precondition(partBytes > 0, "a reader reads")
        self.digest = digest
        self.length = length
        pin = store.pin(digest)
        input = open(store.path(of: digest), O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { throw .attachment("the content \(digest) is not on this node") }
        buffer = [UInt8](repeating: 0, count: partBytes)
    }

    deinit { close(input) }

    /// The next part (at most `partBytes`), or nil after the last. Throws when the file is
    /// shorter than `length`, or its first `length` bytes no longer match the digest (a damaged
    /// disk); the part that would complete the content is then withheld.
    public func next() throws(StoreError) -> [UInt8]? {
        guard read < length else { return nil }
        let wanted = Int(min(Int64(buffer.count), length - read))
        var count = 0
        while count < wanted {
            let got = buffer.withUnsafeMutableBytes { Glibc.read(input, $0.baseAddress! + count, wanted - count) }
            if got < 0 && errno == EINTR { continue }
            guard got >= 0 else { throw .attachment("reading \(digest) failed: \(String(cString: strerror(errno)))") }
            guard got > 0 else { throw .attachment("the content stored as \(digest) ends before its \(length) bytes: the file is damaged") }
            count += got
        }
        let part = Array(buffer[0..<count])
        part.withUnsafeBytes { hash.update($0) }
        read += Int64(count)
        if read == length, hash.finish() != digest.bytes {
            throw .attachment("the content stored as \(digest) no longer matches its digest: the file is damaged")
        }
        return part
    }
}
