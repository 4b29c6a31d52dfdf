import CanopyCore
import CanopyStore
import CanopyWire
import DequeModule

/// The target side's fetches of attachment content (replication-v1.md §6.12): which content
/// set-aside revisions wait for, which is being fetched, and the `attachmentGet` requests in
/// flight. The session drives it; the bytes go to disk as they arrive (`AttachmentDownload`), so
/// memory holds at most `requestsMax` parts whatever the size of the content.
///
/// Fairness: requests are at most `partBytes` and at most `requestsMax` are outstanding, so the
/// connection carries at most that much attachment data ahead of any other message of any
/// channel; the batches of small documents are written meanwhile (their revisions do not wait
/// for content they do not name).
struct AttachmentFetches {
    /// Bytes asked for in one `attachmentGet`.
    static let partBytes = WireLimits.attachmentPartBytesMax
    /// `attachmentGet` requests outstanding at once, at most: 1.5 MiB of parts in flight, and
    /// two of the peer's `inFlightRequestsMax` left for checkpoint requests.
    static let requestsMax = 6
    /// Contents fetched at once (several small attachments travel in one round trip).
    static let activeMax = 8

    /// A content being fetched.
    final class Active {
        let download: AttachmentDownload
        /// The offset the next request asks from.
        var requested: Int64
        /// Requests outstanding for it.
        var outstanding = 0

        init(_ download: AttachmentDownload) {
            self.download = download
            requested = download.received
        }
    }

    /// A request in flight: which content, from where, how many bytes.
    struct Request {
        let digest: AttachmentDigest
        let offset: Int64
        let count: Int
    }

    private(set) var waiting: Deque<AwaitedAttachment> = []
    private var known = Set<AttachmentDigest>()
    /// Content the peer does not have, or sent wrong: not asked again in this session.
    private(set) var unavailable = Set<AttachmentDigest>()
    private(set) var active: [AttachmentDigest: Active] = [:]
    /// Digests of `active` in the order they started (requests go to the oldest first).
    private var order: [AttachmentDigest] = []
    private(set) var requests: [RequestID: Request] = [:]
    /// Content complete and verified whose revisions are not merged yet.
    var completed: [AttachmentDigest] = []
    /// The downloads of `completed`, then of the merge in flight: kept until their content is
    /// published and merged, so their pins keep a collection away from it.
    var verified: [AttachmentDownload] = []
    var publishing: [AttachmentDownload] = []
    /// True while a settle write is with the writer.
    var settling = false
    /// Every set-aside revision is to be looked at (not only those of `completed`).
    var settleAll = false
    /// The store's `setAsideCount` when the waiting list was last read.
    var seenSetAside = -1

    /// Completed contents merged in one write once this many are waiting, or sooner when
    /// nothing being fetched is about to complete: each merge syncs the file system once, so many
    /// small attachments share a sync and the writer stays free for the batches behind them,
    /// while a small attachment fetched beside a large one is merged without waiting for it.
    static let settleBatch = 256
    /// Bytes still to fetch above which an active content is not "about to complete".
    static let largeRemaining: Int64 = 8 << 20

    /// True when the completed contents should be merged now.
    var settleDue: Bool {
        !completed.isEmpty
            && (completed.count >= Self.settleBatch || active.values.allSatisfy { $0.download.remaining >= Self.largeRemaining })
    }

    /// Nothing to fetch, nothing in flight, nothing to merge.
    var isIdle: Bool { waiting.isEmpty && active.isEmpty && requests.isEmpty && completed.isEmpty && !settling && !settleAll }

    /// Adds content to fetch (what is known already is skipped).
    mutating func enqueue(_ awaited: [AwaitedAttachment]) {
        for item in awaited where !unavailable.contains(item.digest) && known.insert(item.digest).inserted {
            waiting.append(item)
        }
    }

    /// The next content to start, if fewer than `activeMax` are active.
    mutating func nextToStart() -> AwaitedAttachment? {
        guard active.count < Self.activeMax else { return nil }
        return waiting.popFirst()
    }

    mutating func started(_ download: AttachmentDownload) {
        active[download.digest] = Active(download)
        order.append(download.digest)
    }

    /// The next request to send, if one fits: the oldest active content with bytes not asked for.
    /// `othersOutstanding` is how many other requests of ours the peer holds.
    mutating func nextRequest(othersOutstanding: Int, id: () -> RequestID) -> (RequestID, AttachmentGet)? {
        guard requests.count < Self.requestsMax, othersOutstanding + requests.count < WireLimits.inFlightRequestsMax - 1 else { return nil }
        for digest in order {
            guard let item = active[digest], item.requested < item.download.length else { continue }
            let count = Int(min(Int64(Self.partBytes), item.download.length - item.requested))
            let requestID = id()
            requests[requestID] = Request(digest: digest, offset: item.requested, count: count)
            let get = AttachmentGet(requestID: requestID, digest: digest.bytes, offset: UInt64(item.requested), maxBytes: count)
            item.requested += Int64(count)
            item.outstanding += 1
            return (requestID, get)
        }
        return nil
    }

    /// Removes and returns the request `id` answers (nil when it is not one of ours).
    mutating func answered(_ id: RequestID) -> Request? {
        guard let request = requests.removeValue(forKey: id) else { return nil }
        active[request.digest]?.outstanding -= 1
        return request
    }

    /// The content is done with (complete, or given up): it stops being active. Its other
    /// requests still in flight are answered and ignored.
    mutating func finished(_ digest: AttachmentDigest, available: Bool) {
        active[digest] = nil
        order.removeAll { $0 == digest }
        if !available { unavailable.insert(digest) }
    }

    /// The session ended: downloads are closed (their partial files stay for the next session).
    mutating func removeAll() {
        waiting.removeAll()
        active.removeAll()
        order.removeAll()
        requests.removeAll()
    }
}
