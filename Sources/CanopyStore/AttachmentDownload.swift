import CanopyCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Content of a known digest and length fetched from a peer in parts, into `partial-HEX` in the
/// attachment directory. The file outlives the process: a fetch cut short by a disconnect or a
/// `kill -9` resumes from the bytes already on disk, which are hashed again when the download is
/// opened (so what was written before a crash counts only if it is still there). `verify`
/// checks that every byte arrived and the whole hashes to the digest (otherwise the partial
/// file is removed), and `AttachmentStore.publish(_:)` then names it by its digest: nothing
/// unverified is ever visible.
///
/// Used from one thread at a time; the file is closed when the download is released.
public final class AttachmentDownload {
    /// The content being fetched.
    public let digest: AttachmentDigest
    /// Its announced length.
    public let length: Int64
    private let store: AttachmentStore
    private let partial: String
    private let output: Int32
    private let hash = Blake2bStream(outputBytes: AttachmentDigest.byteCount)
    /// Held while the download lives: a collection leaves its partial file (and the content,
    /// once published) alone.
    private let pin: AttachmentPin
    /// The process's one writer of the partial file.
    private let claim: AttachmentDownloadClaim
    /// Bytes on disk and hashed: where the next part goes.
    public private(set) var received: Int64 = 0
    /// Where the bytes not yet handed to the disk's write-back start.
    private var writebackFrom: Int64 = 0
    /// The range whose write-back was started last, waited for and dropped at the next start.
    private var writtenBack: Range<Int64>?
    /// Bytes written between two starts of write-back: large content goes to the disk while it
    /// arrives, so the sync that publishes it does not have the whole file still to write.
    static let writebackBytes: Int64 = 8 << 20

    /// Opens (or resumes) the download of the content `claim` holds the partial file of,
    /// `length` bytes; the claim lasts as long as the download. Refused when `length` is over
    /// the store's size limit. Bytes already in the partial file are hashed again; a file longer
    /// than `length` is started over.
    init(store: AttachmentStore, claim: AttachmentDownloadClaim, length: Int64) throws(StoreError) {
        let digest = claim.digest
        guard length >= 0, length <= store.sizeLimit else {
            throw .attachment("\(digest) has \(length) bytes; an attachment has at most \(store.sizeLimit) (the size limit)")
        }
        self.store = store
        self.digest = digest
        self.claim = claim
        self.length = length
        pin = store.pin(digest)
        partial = store.directory + "/partial-" + digest.hex
        output = open(partial, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard output >= 0 else { throw .attachment("cannot open \(partial): \(String(cString: strerror(errno)))") }
        // Every stored property is set: if this throws, deinit runs and closes the file.
        try rehashExisting()
    }

    deinit { close(output) }

    /// Bytes still missing.
    public var remaining: Int64 { length - received }

    /// Hashes what a previous fetch left in the file and positions the next write after it.
    private func rehashExisting() throws(StoreError) {
        var info = stat()
        guard fstat(output, &info) == 0 else { throw .attachment("cannot read \(partial): \(String(cString: strerror(errno)))") }
        var kept = Int64(info.st_size)
        if kept > length {
            guard ftruncate(output, 0) == 0 else { throw .attachment("cannot reset \(partial): \(String(cString: strerror(errno)))") }
            kept = 0
        }
        var offset: Int64 = 0
        // Only a resumed fetch has bytes to read back: a new one allocates nothing here.
        var buffer = kept > 0 ? [UInt8](repeating: 0, count: AttachmentStore.partBytes) : []
        while offset < kept {
            let wanted = Int(min(Int64(buffer.count), kept - offset))
            let count = buffer.withUnsafeMutableBytes { pread(output, $0.baseAddress, wanted, off_t(offset)) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { throw .attachment("reading \(partial) failed: \(String(cString: strerror(errno)))") }
            buffer.withUnsafeBytes { hash.update(UnsafeRawBufferPointer(rebasing: $0[..<count])) }
            offset += Int64(count)
        }
        received = kept
        writebackFrom = kept
        guard lseek(output, off_t(kept), SEEK_SET) >= 0 else {
            throw .attachment("cannot seek in \(partial): \(String(cString: strerror(errno)))")
        }
    }

    /// Appends the part that starts at `received`. More than `length` bytes is refused.
    public func append(_ part: UnsafeRawBufferPointer) throws(StoreError) {
        guard Int64(part.count) <= remaining else {
            throw .attachment("\(digest) received more than its \(length) bytes")
        }
        guard AttachmentStore.writeAll(output, part) else {
            throw .attachment("writing \(partial) failed: \(String(cString: strerror(errno)))")
        }
        hash.update(part)
        received += Int64(part.count)
        if received - writebackFrom >= Self.writebackBytes { startWriteback() }
    }

    /// Starts writing the bytes received since the last start to the disk, without waiting for
    /// them (`sync_file_range` with `SYNC_FILE_RANGE_WRITE`; nothing where it does not exist).
    /// Durability still comes from `AttachmentStore.publish(_:)`: this only spreads the disk's
    /// work over the transfer.
    ///
    /// The range started before this one has had the time of a whole range to reach the disk: it
    /// is waited for and its pages are dropped from the page cache (`POSIX_FADV_DONTNEED`). A
    /// large download then holds at most two ranges of dirty or cached pages instead of its
    /// whole size, so it neither evicts the node's database pages nor makes the kernel find a
    /// fresh page for every byte of it; and it cannot run further ahead of the disk than that.
    private func startWriteback() {
        if let syncRange = AttachmentStore.syncFileRange {
            _ = syncRange(output, off_t(writebackFrom), off_t(received - writebackFrom), AttachmentStore.syncFileRangeWrite)
            if let previous = writtenBack {
                let length = off_t(previous.upperBound - previous.lowerBound)
                if syncRange(output, off_t(previous.lowerBound), length, AttachmentStore.syncFileRangeWaitAll) == 0 {
                    _ = posix_fadvise(output, off_t(previous.lowerBound), length, Int32(POSIX_FADV_DONTNEED))
                }
            }
            writtenBack = writebackFrom..<received
        }
        writebackFrom = received
    }

    /// Every byte arrived: checks the digest. A mismatch removes the partial file and throws
    /// `StoreError.attachment` saying so (the content must be fetched again, from the start).
    /// The content stays in its partial file until `AttachmentStore.publish(_:)` makes it
    /// durable and names it by its digest, so that many small contents share one sync.
    public func verify() throws(StoreError) {
        guard remaining == 0 else { throw .attachment("\(digest) is \(remaining) bytes short of its \(length)") }
        guard hash.finish() == digest.bytes else {
            unlink(partial)
            throw .attachment("the content received for \(digest) does not match its digest: discarded")
        }
        // Large content sends its tail on; small content is left to the publishing sync, which
        // writes many of them at once.
        if writebackFrom > 0 && received > writebackFrom { startWriteback() }
    }

    /// Gives up: the partial file is removed (a peer that sent content of another length).
    public func discard() {
        unlink(partial)
    }
}

extension AttachmentStore {
    /// Makes verified downloads durable and names each by its digest: one sync of the file
    /// system for all of them (`syncfs`), then the renames, then a sync of the directory. The
    /// data is on disk before any name points at it, so a crash leaves each content either
    /// complete under its name or still in its partial file (hashed again on resume).
    public func publish(_ digests: [AttachmentDigest]) throws(StoreError) {
        guard !digests.isEmpty else { return }
        let handle = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard handle >= 0 else { throw .attachment("cannot open \(directory): \(String(cString: strerror(errno)))") }
        defer { close(handle) }
        if let syncFileSystem = Self.syncFileSystem {
            guard syncFileSystem(handle) == 0 else { throw .attachment("syncing \(directory) failed: \(String(cString: strerror(errno)))") }
        } else {
            for digest in digests { try Self.sync(directory + "/partial-" + digest.hex) }
        }
        for digest in digests {
            let partial = directory + "/partial-" + digest.hex
            guard rename(partial, path(of: digest)) == 0 else {
                // Published before (a settle retried after a crash): the content is in place.
                if errno == ENOENT, contains(digest) { continue }
                throw .attachment("storing \(digest) failed: \(String(cString: strerror(errno)))")
            }
        }
        guard fsync(handle) == 0 else { throw .attachment("syncing \(directory) failed: \(String(cString: strerror(errno)))") }
    }

    /// Linux's `syncfs(2)`, looked up at run time (the C library's header declares it only for
    /// `_GNU_SOURCE`, which Swift's import does not set); nil where it does not exist, and each
    /// file is then synced on its own.
    package static let syncFileSystem: (@convention(c) (Int32) -> Int32)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "syncfs") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32) -> Int32).self)
    }()

    /// Linux's `sync_file_range(2)`, looked up at run time as `syncfs` is; nil elsewhere.
    static let syncFileRange: (@convention(c) (Int32, off_t, off_t, UInt32) -> Int32)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "sync_file_range") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32, off_t, off_t, UInt32) -> Int32).self)
    }()
    /// `SYNC_FILE_RANGE_WRITE`: start write-back of the range's dirty pages, do not wait.
    static let syncFileRangeWrite: UInt32 = 2
    /// `SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER`: the
    /// range is on the disk when the call returns.
    static let syncFileRangeWaitAll: UInt32 = 1 | 2 | 4

    /// Syncs one file's data to disk.
    private static func sync(_ path: String) throws(StoreError) {
        let handle = open(path, O_RDONLY | O_CLOEXEC)
        guard handle >= 0 else {
            if errno == ENOENT { return }  // published before
            throw .attachment("cannot open \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(handle) }
        guard fsync(handle) == 0 else { throw .attachment("syncing \(path) failed: \(String(cString: strerror(errno)))") }
    }

    /// Opens or resumes the fetch of `digest` (`AttachmentDownload`), creating the directory;
    /// refused while another download of the process fetches the same content.
    public func beginDownload(_ digest: AttachmentDigest, length: Int64) throws(StoreError) -> AttachmentDownload {
        guard let download = try beginDownloadUnlessFetching(digest, length: length) else {
            throw .attachment("\(digest) is being fetched by another download of this process")
        }
        return download
    }

    /// Opens or resumes the fetch of `digest` as `beginDownload` does, or returns nil while
    /// another download of the process (a session with another peer, say) fetches the same
    /// content: one file, one writer.
    public func beginDownloadUnlessFetching(_ digest: AttachmentDigest, length: Int64) throws(StoreError) -> AttachmentDownload? {
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw .attachment("cannot create the attachment directory \(directory): \(String(cString: strerror(errno)))")
        }
        guard let claim = pins.claimDownload(digest) else { return nil }
        return try AttachmentDownload(store: self, claim: claim, length: length)
    }

    /// Up to `maxBytes` of the content named `digest` from `offset`, with the content's length;
    /// nil when the content is not here. What a peer asks for, a part at a time: the receiver
    /// checks the whole against the digest, so the parts are not checked here.
    public func part(of digest: AttachmentDigest, offset: Int64, maxBytes: Int) throws(StoreError) -> (length: Int64, bytes: [UInt8])? {
        let input = open(path(of: digest), O_RDONLY | O_CLOEXEC)
        guard input >= 0 else {
            if errno == ENOENT { return nil }
            throw .attachment("cannot open \(digest): \(String(cString: strerror(errno)))")
        }
        defer { close(input) }
        var info = stat()
        guard fstat(input, &info) == 0 else { throw .attachment("cannot read \(digest): \(String(cString: strerror(errno)))") }
        let length = Int64(info.st_size)
        guard offset >= 0, offset <= length else { return (length, []) }
        let wanted = Int(min(Int64(maxBytes), length - offset))
        // Read straight into the array's storage: no zero fill of bytes about to be overwritten.
        var failed = false
        let bytes = [UInt8](unsafeUninitializedCapacity: wanted) { buffer, initialized in
            var count = 0
            while count < wanted {
                let got = pread(input, buffer.baseAddress! + count, wanted - count, off_t(offset) + off_t(count))
                if got < 0 && errno == EINTR { continue }
                guard got > 0 else { break }
                count += got
            }
            failed = count < wanted
            initialized = count
        }
        guard !failed else { throw .attachment("reading \(digest) failed: the file ended early or could not be read") }
        return (length, bytes)
    }
}
