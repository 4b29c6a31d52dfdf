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

    /// Parts received and not yet written, at most, counting those whose requests are still in
    /// flight: parts are written off the serial context (`ReplicationSession.appendNext`), and
    /// this bounds what waits for the disk when it is slower than the connection.
    static let partsHeldMax = 10

    /// A content being fetched.
    final class Active {
        let download: AttachmentDownload
        /// The offset the next request asks from.
        var requested: Int64
        /// Requests outstanding for it.
        var outstanding = 0
        /// Bytes received from the peer in order (written, being written or queued).
        var received: Int64
        /// Bytes written and hashed: the download's own count, kept here so that the serial
        /// context never reads the download while a part is being written.
        var appended: Int64
        /// Parts received, waiting for the one before them to be written.
        var queued: Deque<[UInt8]> = []
        /// True while a part is being written off the serial context (one at a time, in order).
        var appending = false

        init(_ download: AttachmentDownload) {
            self.download = download
            requested = download.received
            received = download.received
            appended = download.received
        }

        /// Parts of this content held in memory: queued, and the one being written.
        var partsHeld: Int { queued.count + (appending ? 1 : 0) }
    }

    /// A request in flight: which content, from where, how many bytes.
    struct Request {
        let digest: AttachmentDigest
        let offset: Int64
        let count: Int
    }

    private(set) var waiting: Deque<AwaitedAttachment> = []
    private var known = Set<AttachmentDigest>()
    /// Content the peer does not have, could not read, or sent wrong: not asked again in this
    /// session until `forgetUnavailable` (every `unavailableRetrySeconds`).
    private(set) var unavailable = Set<AttachmentDigest>()
    private(set) var active: [AttachmentDigest: Active] = [:]
    /// Digests of `active` in the order they started (requests go to the oldest first).
    private var order: [AttachmentDigest] = []
    private(set) var requests: [RequestID: Request] = [:]
    /// Parts received and not yet written, over every active content.
    private(set) var partsHeld = 0
    /// Contents another fetch of this node is fetching (from another peer): tried again every
    /// `retrySeconds`, and taken as done once stored.
    private(set) var heldElsewhere: [AwaitedAttachment] = []
    /// True while a retry of `heldElsewhere` is scheduled.
    var retryScheduled = false
    static let retrySeconds = 0.25
    /// How often an idle pulling session looks again at the revisions set aside for content
    /// (`ReplicationSession.scheduleSetAsideRecheck`).
    static let setAsideRecheckSeconds = 5.0
    /// How long content the peer could not send is left alone before it is asked for again on
    /// the same connection (the peer may have fetched it, or its file been repaired, since).
    static let unavailableRetrySeconds = 30.0

    /// Content the peer could not send may be asked for again.
    mutating func forgetUnavailable() {
        unavailable.removeAll()
    }
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
            && (completed.count >= Self.settleBatch || active.values.allSatisfy { $0.download.length - $0.appended >= Self.largeRemaining })
    }

    /// Nothing to fetch, nothing in flight, nothing to merge.
    var isIdle: Bool {
        waiting.isEmpty && heldElsewhere.isEmpty && active.isEmpty && requests.isEmpty && completed.isEmpty && !settling && !settleAll
    }

    /// Adds content to fetch, skipping what is on its way already (waiting, being fetched, held
    /// by another fetch, or fetched and not yet merged) and what the peer said it lacks. Content
    /// this session finished with earlier comes back: a revision set aside after that content's
    /// merge (it arrived while the content was being named) waits for it too, and is merged
    /// without a fetch once the content is found on disk.
    mutating func enqueue(_ awaited: [AwaitedAttachment]) {
        for item in awaited where !unavailable.contains(item.digest) {
            guard known.insert(item.digest).inserted || !isOnItsWay(item.digest) else { continue }
            waiting.append(item)
        }
    }

    /// Whether `digest` is waiting, being fetched, held by another fetch, or fetched and not
    /// yet merged.
    private func isOnItsWay(_ digest: AttachmentDigest) -> Bool {
        active[digest] != nil || waiting.contains { $0.digest == digest } || heldElsewhere.contains { $0.digest == digest }
            || completed.contains(digest) || verified.contains { $0.digest == digest } || publishing.contains { $0.digest == digest }
    }

    /// The next content to start, if fewer than `activeMax` are active.
    mutating func nextToStart() -> AwaitedAttachment? {
        guard active.count < Self.activeMax else { return nil }
        return waiting.popFirst()
    }

    /// `item` is being fetched by another fetch of this node: set by until the next retry.
    mutating func holdElsewhere(_ item: AwaitedAttachment) {
        heldElsewhere.append(item)
    }

    /// The contents held elsewhere go back to the front of the queue.
    mutating func retryHeldElsewhere() {
        for item in heldElsewhere.reversed() { waiting.prepend(item) }
        heldElsewhere = []
    }

    mutating func started(_ download: AttachmentDownload) {
        active[download.digest] = Active(download)
        order.append(download.digest)
    }

    /// The next request to send, if one fits: the oldest active content with bytes not asked for.
    /// `othersOutstanding` is how many other requests of ours the peer holds.
    mutating func nextRequest(othersOutstanding: Int, id: () -> RequestID) -> (RequestID, AttachmentGet)? {
        guard requests.count < Self.requestsMax, requests.count + partsHeld < Self.partsHeldMax,
            othersOutstanding + requests.count < WireLimits.inFlightRequestsMax - 1
        else { return nil }
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

    /// A part arrived in order for `item`: queued to be written.
    mutating func queue(_ data: [UInt8], for item: Active) {
        item.received += Int64(data.count)
        item.queued.append(data)
        partsHeld += 1
    }

    /// The next part of `item` to write, if none is being written: it is then being written.
    mutating func nextToAppend(_ item: Active) -> [UInt8]? {
        guard !item.appending, let data = item.queued.popFirst() else { return nil }
        item.appending = true
        return data
    }

    /// The part being written for `item` was written (`count` bytes) or failed.
    mutating func appendEnded(_ item: Active, count: Int) {
        item.appending = false
        item.appended += Int64(count)
        partsHeld -= 1
    }

    /// The content is done with (complete, or given up): it stops being active. Its other
    /// requests still in flight are answered and ignored, and a part being written for it is
    /// ignored when it ends.
    mutating func finished(_ digest: AttachmentDigest, available: Bool) {
        if let item = active[digest] {
            partsHeld -= item.partsHeld
            item.queued.removeAll()
        }
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
        partsHeld = 0
        heldElsewhere.removeAll()
    }
}
