import CanopyCore
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A hold on the content named `digest` in an attachment directory: while it is held, no
/// collection (`AttachmentStore.collectGarbage(keeping:)`) removes that content, even when no
/// revision names it. A writer holds one from before its content is stored until the revision
/// naming it has committed; a reader holds one while it reads.
///
/// Released by `release()` or when the pin is deinitialised, whichever comes first. Hold it in a
/// variable that is used at the end (`defer { pin.release() }`): an object that is never used
/// again may be deinitialised before the end of its scope.
///
/// A pin only protects the content's file; whether the file is there is a separate question.
/// A pin taken after a collection removed the content finds the file gone (`contains`), and the
/// writer stores the content again, under the pin.
public final class AttachmentPin: Sendable {
    /// The content held.
    public let digest: AttachmentDigest
    private let pins: AttachmentPinTable
    /// True until the pin is released; released once only.
    private let held = Atomic<Bool>(true)

    init(_ digest: AttachmentDigest, in pins: AttachmentPinTable) {
        self.digest = digest
        self.pins = pins
    }

    deinit { release() }

    /// Lets the content go; later calls do nothing.
    public func release() {
        if held.exchange(false, ordering: .acquiringAndReleasing) { pins.unpin(digest) }
    }
}

/// A download's hold on the partial file of `digest` (`AttachmentPinTable.claimDownload`): while
/// it lives, no other download of the process begins on that content. Released when it is
/// deinitialised, so a download that fails to open gives it back with nothing to remember.
final class AttachmentDownloadClaim: Sendable {
    let digest: AttachmentDigest
    private let pins: AttachmentPinTable

    fileprivate init(_ digest: AttachmentDigest, in pins: AttachmentPinTable) {
        self.digest = digest
        self.pins = pins
    }

    deinit { pins.releaseDownload(digest) }
}

/// The pins of one attachment directory and the collections running on it, shared by every
/// `AttachmentStore` of the process that names the directory (the agent opens one store per
/// database, all on `DIR/attachments`): a pin taken through one store holds against a collection
/// run through another. Pins held by another process are not seen; collect only where one
/// process writes the directory.
///
/// Invariant (under `state`'s lock): a collection removes a file only when its digest was not
/// pinned at any moment since the collection began, and it checks that and unlinks the file
/// under the same lock; so a pin is either taken first and the file stays, or taken after the
/// unlink and finds the file gone.
final class AttachmentPinTable: Sendable {
    /// What the lock guards.
    struct State {
        /// How many pins each pinned digest has.
        var pins: [AttachmentDigest: Int] = [:]
        /// For each running collection, every digest pinned since it began.
        var pinnedDuring: [Int: Set<AttachmentDigest>] = [:]
        /// The id the next collection gets.
        var nextCollection = 0
        /// Content a download of this process is fetching into its `partial-` file.
        var downloading: Set<AttachmentDigest> = []
        /// The `incoming-` file names of this process's uploads in progress.
        var uploading: Set<String> = []
    }

    let state = Mutex(State())

    /// Takes a pin on `digest`, noted by every running collection.
    func pin(_ digest: AttachmentDigest) -> AttachmentPin {
        state.withLock { state in
            state.pins[digest, default: 0] += 1
            for id in state.pinnedDuring.keys { state.pinnedDuring[id]!.insert(digest) }
        }
        return AttachmentPin(digest, in: self)
    }

    /// Gives back one pin on `digest`.
    fileprivate func unpin(_ digest: AttachmentDigest) {
        state.withLock { state in
            guard let count = state.pins[digest] else { preconditionFailure("unpinning \(digest), which is not pinned") }
            state.pins[digest] = count > 1 ? count - 1 : nil
        }
    }

    /// Claims the partial file of `digest` for one download: nil when another download of the
    /// process holds it (two fetches writing one file would each verify only its own bytes).
    func claimDownload(_ digest: AttachmentDigest) -> AttachmentDownloadClaim? {
        let claimed = state.withLock { state in state.downloading.insert(digest).inserted }
        return claimed ? AttachmentDownloadClaim(digest, in: self) : nil
    }

    /// Gives back the claim on `digest`.
    fileprivate func releaseDownload(_ digest: AttachmentDigest) {
        _ = state.withLock { state in state.downloading.remove(digest) }
    }

    /// Notes that an upload of this process writes the `incoming-` file `name`, from before it
    /// creates the file until after it is gone (renamed or removed).
    func beginUpload(_ name: String) {
        _ = state.withLock { state in state.uploading.insert(name) }
    }

    /// The upload writing `name` has ended.
    func endUpload(_ name: String) {
        _ = state.withLock { state in state.uploading.remove(name) }
    }

    /// Runs `body` under the lock with the names of the uploads in progress: a file `body`
    /// finds and no upload names cannot become one's while it runs.
    func withUploads<T>(_ body: (Set<String>) -> T) -> T {
        state.withLock { state in body(state.uploading) }
    }

    /// Starts a collection: from now until `endCollection`, every digest pinned (those pinned
    /// now included) is remembered for it. Returns its id.
    func beginCollection() -> Int {
        state.withLock { state in
            let id = state.nextCollection
            state.nextCollection += 1
            state.pinnedDuring[id] = Set(state.pins.keys)
            return id
        }
    }

    /// Ends collection `id`.
    func endCollection(_ id: Int) {
        _ = state.withLock { state in state.pinnedDuring.removeValue(forKey: id) }
    }

    /// Runs `remove` under the lock unless `digest` was pinned at any moment since collection
    /// `id` began; returns whether it ran.
    func unlessPinned(_ digest: AttachmentDigest, collection id: Int, _ remove: () -> Void) -> Bool {
        state.withLock { state in
            guard state.pins[digest] == nil, state.pinnedDuring[id]?.contains(digest) != true else { return false }
            remove()
            return true
        }
    }

    /// A weak reference to a table, as the registry holds them.
    private struct Entry: Sendable {
        weak var table: AttachmentPinTable?
    }

    /// The table of every directory a live store names, keyed by `key(of:)`.
    private static let registry = Mutex<[String: Entry]>([:])

    /// The table of `directory`, shared with every other live store naming it.
    static func shared(for directory: String) -> AttachmentPinTable {
        let key = key(of: directory)
        return registry.withLock { tables in
            if let table = tables[key]?.table { return table }
            tables = tables.filter { $0.value.table != nil }
            let table = AttachmentPinTable()
            tables[key] = Entry(table: table)
            return table
        }
    }

    /// `directory` as an absolute path with `.`, `..` and symbolic links resolved (of its parent
    /// when it does not exist yet), so that two spellings of one directory share a table.
    static func key(of directory: String) -> String {
        let standard = URL(fileURLWithPath: directory).standardizedFileURL
        if let resolved = realpath(standard.path, nil) {
            defer { free(resolved) }
            return String(cString: resolved)
        }
        if let parent = realpath(standard.deletingLastPathComponent().path, nil) {
            defer { free(parent) }
            let base = String(cString: parent)
            return (base.hasSuffix("/") ? base : base + "/") + standard.lastPathComponent
        }
        return standard.path
    }
}
