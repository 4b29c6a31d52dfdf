import CanopyCore
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Attachment content, one file per digest in a directory (`Tools/canopy-bench/README.md`,
/// *attachment-storage*, says why files and not a table): the file named by a digest's 64 hex
/// digits holds exactly the content with that BLAKE2b-256 digest. Content is streamed in and
/// out in 1 MiB parts, never held whole in memory.
///
/// A file appears under its final name only complete, synced and verified: content is written
/// to `incoming-<random>` in the directory while it is hashed, synced, then renamed, and the
/// directory synced. A crash leaves at most an `incoming-` file per upload in progress, which
/// `removeIncoming()` clears and `leftoverIncoming()` lists.
///
/// Content no revision names stays until a collection (`collectGarbage(keeping:)`) removes it.
/// A collection never removes pinned content (`pin(_:)`, `AttachmentPin`): content is pinned
/// before it is named by its digest (`addPinned(contentsOf:)`, `AttachmentUpload.finishPinned()`),
/// and the writer holds the pin until the revision naming it has committed; `read` pins while
/// it reads. A write that names content it did not store itself (a body whose stubs were copied
/// from another revision) is checked before its transaction: when no kept revision may name that
/// content any more, pin it across the write.
///
/// Thread safety: every method may be called from any thread; the file system orders them (two
/// writers of the same content both rename onto the same name, with the same bytes). Every store
/// of the process naming one directory shares its pins (`AttachmentPinTable`).
public final class AttachmentStore: Sendable {
    /// The directory holding the content files.
    public let directory: String
    /// The largest content accepted, in bytes; larger content is refused before anything is stored.
    public let sizeLimit: Int64
    /// The pins on this directory's content, shared with the process's other stores naming it.
    let pins: AttachmentPinTable

    /// The default `sizeLimit`: 4 GiB.
    public static let defaultSizeLimit: Int64 = 4 << 30
    /// Bytes read or written at a time.
    static let partBytes = 1 << 20

    /// The store in `directory`, which is created (mode 0700) when the first content is added.
    public init(directory: String, sizeLimit: Int64 = AttachmentStore.defaultSizeLimit) {
        self.directory = directory
        self.sizeLimit = sizeLimit
        pins = AttachmentPinTable.shared(for: directory)
    }

    /// Pins the content named `digest`: no collection removes it until the pin is released.
    /// Pinning does not store anything: check `contains` under the pin when the content may
    /// have been collected before it.
    public func pin(_ digest: AttachmentDigest) -> AttachmentPin { pins.pin(digest) }

    /// Runs `body` with the content named `digest` pinned.
    public func withPin<T, E: Error>(_ digest: AttachmentDigest, _ body: () throws(E) -> T) throws(E) -> T {
        let pin = pin(digest)
        defer { pin.release() }
        return try body()
    }

    /// Whether this store and `other` name the same directory (and so share their content and
    /// their pins).
    public func sharesDirectory(with other: AttachmentStore) -> Bool { pins === other.pins }

    /// The path of the content named `digest`, whether or not it is here.
    public func path(of digest: AttachmentDigest) -> String { directory + "/" + digest.hex }

    /// Whether the content named `digest` is here, with `length` bytes when given.
    public func contains(_ digest: AttachmentDigest, length: Int64? = nil) -> Bool {
        var info = stat()
        guard stat(path(of: digest), &info) == 0 else { return false }
        return length.map { Int64(info.st_size) == $0 } ?? true
    }

    /// Stores the content of the file at `source`, streaming it; returns its digest and length.
    /// Content already here is not written again. Refuses content over `sizeLimit` before
    /// reading any of it, and a source that changes length while it is read. The content is
    /// here when this returns, but a collection may remove it at any time after: to name it in a
    /// revision, use `addPinned(contentsOf:)`.
    public func add(contentsOf source: String) throws(StoreError) -> (digest: AttachmentDigest, length: Int64) {
        let stored = try addPinned(contentsOf: source)
        stored.pin.release()
        return (stored.digest, stored.length)
    }

    /// `add(contentsOf:)`, returning with the content pinned (pinned before it was named, so it
    /// is here): hold the pin until the revision naming the content has committed.
    public func addPinned(contentsOf source: String) throws(StoreError) -> (digest: AttachmentDigest, length: Int64, pin: AttachmentPin) {
        let input = open(source, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { throw .attachment("cannot open \(source): \(String(cString: strerror(errno)))") }
        defer { close(input) }
        var info = stat()
        guard fstat(input, &info) == 0 else { throw .attachment("cannot read \(source): \(String(cString: strerror(errno)))") }
        return try add(length: Int64(info.st_size), named: source) { buffer in Glibc.read(input, buffer.baseAddress, buffer.count) }
    }

    /// Stores `length` bytes that `next` reads into the buffer it is given (returning the count,
    /// 0 at the end, -1 on error with `errno` set), as `addPinned(contentsOf:)` does.
    func add(
        length: Int64, named source: String, _ next: (UnsafeMutableRawBufferPointer) -> Int
    ) throws(StoreError) -> (digest: AttachmentDigest, length: Int64, pin: AttachmentPin) {
        let upload = try beginUpload(length: length, from: source)
        var buffer = [UInt8](repeating: 0, count: Self.partBytes)
        while upload.remaining > 0 {
            let wanted = Int(min(Int64(buffer.count), upload.remaining))
            let count = buffer.withUnsafeMutableBytes { next(UnsafeMutableRawBufferPointer(rebasing: $0[..<wanted])) }
            guard count >= 0 else { throw .attachment("reading \(source) failed: \(String(cString: strerror(errno)))") }
            guard count > 0 else { throw .attachment("\(source) shrank while it was read; nothing was stored") }
            do {
                try buffer.withUnsafeBytes { raw in try upload.write(UnsafeRawBufferPointer(rebasing: raw[..<count])) }
            } catch let error as StoreError {
                throw error
            } catch {
                throw .attachment("\(error)")
            }
        }
        var probe: UInt8 = 0
        guard withUnsafeMutableBytes(of: &probe, { next($0) }) == 0 else {
            throw .attachment("\(source) grew while it was read; nothing was stored")
        }
        return try upload.finishPinned()
    }

    /// Starts storing content of exactly `length` bytes that arrive in parts (from `source`, for
    /// messages): refused at once when `length` is over `sizeLimit`.
    public func beginUpload(length: Int64, from source: String) throws(StoreError) -> AttachmentUpload {
        guard length >= 0, length <= sizeLimit else {
            throw .attachment("\(source) has \(length) bytes; an attachment has at most \(sizeLimit) (the size limit)")
        }
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw .attachment("cannot create the attachment directory \(directory): \(String(cString: strerror(errno)))")
        }
        return try AttachmentUpload(store: self, length: length, source: source)
    }

    /// Reads the content named `digest` in parts of at most 1 MiB, handing each to `part`
    /// (`AttachmentReader`, which pins the content and checks it against the digest: content that
    /// no longer hashes to its name, a damaged disk, throws before its last part is handed over).
    public func read(_ digest: AttachmentDigest, _ part: (UnsafeRawBufferPointer) throws -> Void) throws {
        var info = stat()
        guard stat(path(of: digest), &info) == 0 else { throw StoreError.attachment("the content \(digest) is not on this node") }
        let reader = try AttachmentReader(self, digest: digest, length: Int64(info.st_size), partBytes: Self.partBytes)
        while let bytes = try reader.next() { try bytes.withUnsafeBytes(part) }
    }

    /// Copies the content named `digest` from `source` (another directory: a backup's) and
    /// returns its length. It is read part by part and checked against its digest as `read`
    /// checks it, so content damaged in `source` throws and nothing of it is stored here.
    public func copy(_ digest: AttachmentDigest, from source: AttachmentStore) throws(StoreError) -> Int64 {
        var info = stat()
        guard stat(source.path(of: digest), &info) == 0 else { throw .attachment("the content \(digest) is not on this node") }
        let upload = try beginUpload(length: Int64(info.st_size), from: source.path(of: digest))
        do {
            try source.read(digest) { part in try upload.write(part) }
        } catch let error as StoreError {
            throw error
        } catch {
            throw .attachment("\(error)")
        }
        let stored = try upload.finish()
        guard stored.digest == digest else {
            throw .attachment("\(source.path(of: digest)) changed while it was copied; it holds \(stored.digest) now")
        }
        return stored.length
    }

    /// Removes what interrupted uploads left: every `incoming-` file that no upload of this
    /// process writes. Called when the agent starts, holding its directory's lock: no other
    /// process writes there then, so every such file is a crashed process's. Returns what it
    /// removed.
    @discardableResult
    public func removeIncoming() -> [LeftoverFile] {
        pins.withUploads { live in
            let leftovers = Self.incomingFiles(in: directory, except: live)
            for file in leftovers { unlink(directory + "/" + file.name) }
            return leftovers
        }
    }

    /// The `incoming-` files that no upload of this process writes (`removeIncoming` removes
    /// them), by name.
    public func leftoverIncoming() -> [LeftoverFile] {
        pins.withUploads { live in Self.incomingFiles(in: directory, except: live) }
    }

    /// An `incoming-` file no upload holds: what a process killed during an upload left.
    public struct LeftoverFile: Sendable, Equatable {
        /// Its name in the directory.
        public var name: String
        /// Its size.
        public var bytes: Int64
    }

    private static func incomingFiles(in directory: String, except live: Set<String>) -> [LeftoverFile] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return [] }
        return names.filter { $0.hasPrefix("incoming-") && !live.contains($0) }.sorted().map { name in
            var info = stat()
            return LeftoverFile(name: name, bytes: stat(directory + "/" + name, &info) == 0 ? Int64(info.st_size) : 0)
        }
    }

    func syncDirectory() throws(StoreError) {
        let handle = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard handle >= 0 else { throw .attachment("cannot open \(directory): \(String(cString: strerror(errno)))") }
        defer { close(handle) }
        guard fsync(handle) == 0 else { throw .attachment("syncing \(directory) failed: \(String(cString: strerror(errno)))") }
    }

    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if written < 0 {
                if errno == EINTR { continue }
                return false
            }
            offset += written
        }
        return true
    }
}

/// Content on its way into an `AttachmentStore`: written to an `incoming-` file and hashed as
/// its parts arrive, named by its digest by `finish`. Dropped without `finish` (or after a
/// failure), it leaves nothing behind. Used from one thread at a time.
public final class AttachmentUpload {
    private let store: AttachmentStore
    private let source: String
    private let incoming: String
    /// `incoming`'s name in the directory, noted in the pin table while the upload lives.
    private let incomingName: String
    private let output: Int32
    private let hash = Blake2bStream(outputBytes: AttachmentDigest.byteCount)
    private let length: Int64
    private var written: Int64 = 0
    private var done = false

    init(store: AttachmentStore, length: Int64, source: String) throws(StoreError) {
        self.store = store
        self.source = source
        self.length = length
        incomingName = "incoming-" + Hex.encode((0..<8).map { _ in UInt8.random(in: 0...255) })
        incoming = store.directory + "/" + incomingName
        store.pins.beginUpload(incomingName)
        output = open(incoming, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard output >= 0 else {
            let reason = String(cString: strerror(errno))
            store.pins.endUpload(incomingName)
            throw .attachment("cannot create \(incoming): \(reason)")
        }
    }

    deinit {
        close(output)
        if !done { unlink(incoming) }
        store.pins.endUpload(incomingName)
    }

    /// Bytes still expected.
    public var remaining: Int64 { length - written }

    /// Adds the next part; more than the announced length is refused.
    public func write(_ part: UnsafeRawBufferPointer) throws(StoreError) {
        guard Int64(part.count) <= remaining else { throw .attachment("\(source) sent more than its \(length) bytes") }
        hash.update(part)
        guard AttachmentStore.writeAll(output, part) else {
            throw .attachment("writing \(incoming) failed: \(String(cString: strerror(errno)))")
        }
        written += Int64(part.count)
    }

    /// Syncs the content and names it by its digest; every announced byte must have arrived.
    /// The content is here when this returns, but a collection may remove it at any time after:
    /// to name it in a revision, use `finishPinned()`.
    public func finish() throws(StoreError) -> (digest: AttachmentDigest, length: Int64) {
        let stored = try finishPinned()
        stored.pin.release()
        return (stored.digest, stored.length)
    }

    /// `finish()`, returning with the content pinned: the pin is taken before the content is
    /// named, so content a collection removed a moment before is stored again, and none can
    /// remove it until the pin is released. Hold it until the revision naming the content has
    /// committed.
    public func finishPinned() throws(StoreError) -> (digest: AttachmentDigest, length: Int64, pin: AttachmentPin) {
        guard remaining == 0 else { throw .attachment("\(source) ended \(remaining) bytes short of its \(length)") }
        let digest = AttachmentDigest(bytes: hash.finish())
        guard fsync(output) == 0 else { throw .attachment("syncing \(incoming) failed: \(String(cString: strerror(errno)))") }
        let pin = store.pin(digest)
        guard rename(incoming, store.path(of: digest)) == 0 else {
            pin.release()
            throw .attachment("storing \(digest) failed: \(String(cString: strerror(errno)))")
        }
        done = true
        do {
            try store.syncDirectory()
        } catch {
            pin.release()
            throw error
        }
        return (digest, length, pin)
    }
}

/// The checks a body's `_attachments` member gets before anything is written: its shape
/// (`Attachments.metadata(in:)`), and for a local write, that every content it names is here.
enum AttachmentCheck {
    /// The bytes of a canonical body's `_attachments` key, to find bodies that may have one
    /// without parsing every body.
    private static let key = Array("\"\(Attachments.member)\":".utf8)

    /// Whether the canonical body `bytes` has an `_attachments` member at its top level.
    static func names(_ bytes: [UInt8]) -> Bool {
        // memchr finds each `_` at the C library's vector speed; the key is checked only there.
        let found = bytes.withUnsafeBytes { body -> Bool in
            guard let base = body.baseAddress, body.count >= key.count else { return false }
            var offset = 1
            while offset <= body.count - key.count + 1,
                  let hit = memchr(base + offset, Int32(UInt8(ascii: "_")), body.count - offset) {
                let start = base.distance(to: UnsafeRawPointer(hit)) - 1
                if start + key.count <= body.count,
                   memcmp(base + start, key, key.count) == 0 { return true }
                offset = start + 2
            }
            return false
        }
        guard found, let member = CanonicalJSONReader.member(Attachments.member, of: bytes) else { return false }
        return member != nil
    }

    /// Checks that a canonical body's `_attachments` member is well formed.
    static func checkShape(_ body: [UInt8], documentID: String) throws(StoreInputError) {
        do {
            _ = try metadata(of: body)
        } catch {
            throw .invalidAttachments(documentID: documentID, detail: error.description)
        }
    }

    /// The attachments a canonical body names (none when it has no `_attachments` member).
    static func metadata(of body: [UInt8]) throws(AttachmentError) -> [String: AttachmentMetadata] {
        // Only the member is read when the reader can find it; the whole body otherwise.
        if let member = CanonicalJSONReader.member(Attachments.member, of: body) {
            guard let member else { return [:] }
            return try Attachments.metadata(in: .object([Attachments.member: member]))
        }
        let value: JSONValue
        do { value = try JSONValue.parse(body) } catch { throw AttachmentError("the body is not JSON: \(error)") }
        return try Attachments.metadata(in: value)
    }

    /// Checks each write's `_attachments`: well formed, and every content it names stored in
    /// `store` with its length. `missing` is added to the refusal of content that is not here
    /// (what the caller could do about it).
    static func check(_ writes: [LocalWrite], against store: AttachmentStore, missing: String = "") throws(StoreInputError) {
        for write in writes {
            guard let body = write.body, case .object(let members) = body, members[Attachments.member] != nil else { continue }
            let attachments: [String: AttachmentMetadata]
            do { attachments = try Attachments.metadata(in: body) } catch {
                throw .invalidAttachments(documentID: write.documentID, detail: error.description)
            }
            for (name, metadata) in attachments.sorted(by: { $0.key < $1.key }) where !store.contains(metadata.digest, length: metadata.length) {
                throw .invalidAttachments(
                    documentID: write.documentID,
                    detail: "the content of attachment \"\(name.prefix(80))\" (\(metadata.digest), \(metadata.length) bytes) is not on this node" + missing)
            }
        }
    }
}
