import CanopyCore
import CanopyStore
import CanopyWire

/// Attachment content between the two sides (replication-v1.md §6.12), when both set the
/// `attachments` feature: as the source, answering the peer's `attachmentGet` with parts read
/// from disk; as the target, fetching the content that the revisions this node set aside wait
/// for (`DocumentStore+AwaitingContent`), then merging those revisions.
extension ReplicationSession {
    /// Whether attachment content flows on this session.
    var attachmentsAgreed: Bool { machine.attachmentsAgreed }

    // MARK: Source

    /// Answers a part of content this node holds, or `notFound`. Only content that a revision
    /// the peer may read names is served: nothing to a peer this node does not push to (a
    /// write-only share), and with a filter (a prefix share, document ids) only content a
    /// document that passes it names; the peer is told it is not here otherwise, as for content
    /// only another database names (replication-v1.md §6.12).
    func answerAttachmentGet(_ get: AttachmentGet) {
        let digest = AttachmentDigest(bytes: get.digest)
        let offset = Int64(clamping: get.offset)
        let part: (length: Int64, bytes: [UInt8])?
        do {
            guard try peerMayRead(digest) else {
                return send(.error(ErrorMessage(requestID: get.requestID, code: .notFound, message: "\(digest) is not on this node")))
            }
            part = try store.attachmentPart(of: digest, offset: offset, maxBytes: get.maxBytes)
        } catch {
            logger.warning("reading attachment content for a peer failed", metadata: ["digest": "\(digest)", "error": "\(error)"])
            return send(.error(ErrorMessage(requestID: get.requestID, code: .storageFailure, message: "reading \(digest) failed")))
        }
        guard let part else {
            return send(.error(ErrorMessage(requestID: get.requestID, code: .notFound, message: "\(digest) is not on this node")))
        }
        guard servedPartIsSound(digest, offset: offset, part) else {
            store.reportDamagedContent(digest)
            logger.error("attachment content is damaged on this node: it does not hash to its digest; not sent (restore the file from a backup or a peer)",
                         metadata: ["digest": "\(digest)"])
            return send(.error(ErrorMessage(
                requestID: get.requestID, code: .storageFailure, message: "\(digest) is damaged on this node: it does not hash to its digest")))
        }
        send(.attachmentPart(AttachmentPart(requestID: get.requestID, length: UInt64(part.length), data: part.bytes)))
    }

    /// Hashes content as its parts are served in order from the start: the part that ends the
    /// content is sent only when the whole hashes to its digest, so a peer never receives
    /// damaged content whole. A fetch that starts or goes on elsewhere (a peer resuming one an
    /// earlier connection began) has the bytes before it read from disk into the hash first.
    /// At most `servedHashesMax` contents are followed at once.
    private func servedPartIsSound(_ digest: AttachmentDigest, offset: Int64, _ part: (length: Int64, bytes: [UInt8])) -> Bool {
        if servedHashes[digest]?.next != offset {
            if servedHashes[digest] == nil, servedHashes.count >= Self.servedHashesMax,
                let oldest = servedHashes.keys.min(by: { $0.hex < $1.hex })
            {
                servedHashes[oldest] = nil
            }
            let stream = Blake2bStream(outputBytes: AttachmentDigest.byteCount)
            guard hashPrefix(of: digest, upTo: offset, into: stream) else {
                servedHashes[digest] = nil
                return false
            }
            servedHashes[digest] = (offset, stream)
        }
        guard let (_, stream) = servedHashes[digest] else { return true }
        stream.update(part.bytes)
        let end = offset + Int64(part.bytes.count)
        guard end >= part.length else {
            servedHashes[digest] = (end, stream)
            return true
        }
        servedHashes[digest] = nil
        return stream.finish() == digest.bytes
    }

    /// Feeds bytes `0..<end` of stored content `digest` into `stream`; false when they cannot
    /// all be read (the file is shorter, gone, or unreadable: not sound).
    private func hashPrefix(of digest: AttachmentDigest, upTo end: Int64, into stream: Blake2bStream) -> Bool {
        var at: Int64 = 0
        while at < end {
            guard let read = try? store.attachmentPart(of: digest, offset: at, maxBytes: Int(min(end - at, 1 << 20))),
                !read.bytes.isEmpty
            else { return false }
            stream.update(read.bytes)
            at += Int64(read.bytes.count)
        }
        return true
    }

    /// Whether the peer may read content `digest`: this node pushes to it, and (with a push
    /// filter) a document the filter passes names the content. Remembered for the session.
    private func peerMayRead(_ digest: AttachmentDigest) throws(StoreError) -> Bool {
        guard configuration.direction.pushes else { return false }
        let filter = configuration.pushFilter
        if case .all = filter { return true }
        if readableAttachments.contains(digest) { return true }
        var prefix: String?
        var ids: [String]?
        switch filter {
        case .idPrefix(let value): prefix = value
        case .documentIDs(let value): ids = value
        case .all, .predicate: break
        }
        let readable = try store.namesAttachment(digest, idPrefix: prefix, documentIDs: ids) { documentID, body in
            filter.accepts(documentID: documentID, body: filter.needsBody ? try? JSONValue.parse(body) : nil)
        }
        if readable { readableAttachments.insert(digest) }
        return readable
    }

    // MARK: Target

    /// Reads what set-aside revisions wait for when the store set more aside since the last
    /// look (or `force`), and starts fetching.
    func refreshAwaitedAttachments(force: Bool = false) {
        guard attachmentsAgreed, configuration.direction.pulls, !isClosed else { return }
        let count = store.setAsideCount
        guard force || count != fetches.seenSetAside else { return }
        fetches.seenSetAside = count
        do {
            fetches.enqueue(try store.awaitedAttachments())
        } catch {
            return fail(.store(error))
        }
        pumpAttachmentFetches()
    }

    /// Starts contents and sends requests while there is room. Content stored meanwhile (by a
    /// fetch from another peer, or an upload) is merged without a fetch; content another fetch of
    /// this node holds is tried again later, since one partial file takes one writer.
    func pumpAttachmentFetches() {
        while !isClosed, let next = fetches.nextToStart() {
            if store.holdsAttachment(next.digest, length: next.length) {
                fetches.completed.append(next.digest)
                continue
            }
            do {
                guard let download = try store.beginDownloadUnlessFetching(next.digest, length: next.length) else {
                    fetches.holdElsewhere(next)
                    continue
                }
                fetches.started(download)
                if download.remaining == 0 { completeDownload(download) }
            } catch {
                logger.warning("cannot fetch attachment content", metadata: ["digest": "\(next.digest)", "error": "\(error)"])
                fetches.finished(next.digest, available: false)
            }
        }
        if !fetches.heldElsewhere.isEmpty { scheduleFetchRetry() }
        while !isClosed, let (_, get) = fetches.nextRequest(
            othersOutstanding: machine.ourRequestsOutstanding - fetches.requests.count, id: { allocateRequestID() }) {
            send(.attachmentGet(get))
        }
        settleCompletedAttachments()
    }

    /// Tries the contents another fetch of this node held again, once, a little later.
    private func scheduleFetchRetry() {
        guard !fetches.retryScheduled else { return }
        fetches.retryScheduled = true
        _ = scheduler.schedule(after: AttachmentFetches.retrySeconds) { [weak self] in
            guard let self, !self.isClosed else { return }
            self.fetches.retryScheduled = false
            self.fetches.retryHeldElsewhere()
            self.pumpAttachmentFetches()
            if self.drainCompletion != nil { self.finishDrainIfIdle() }
        }
    }

    /// A part arrived: checked against the request and the content, then queued to be written
    /// at the content's end, in order, off the serial context (`appendNext`).
    func receiveAttachmentPart(_ part: AttachmentPart) throws(ReplicationError) {
        guard let request = fetches.answered(part.requestID) else { return }
        defer { pumpAttachmentFetches() }
        guard let item = fetches.active[request.digest] else { return }
        let download = item.download
        guard part.length == UInt64(download.length), part.data.count == request.count, request.offset == item.received else {
            return refuseContent(
                download, reason: "the peer sent \(part.data.count) bytes of \(part.length) for \(download.digest), announced with \(download.length)")
        }
        fetches.queue(part.data, for: item)
        appendNext(item)
    }

    /// Writes and hashes `item`'s next queued part on the worker, if none is being written:
    /// parts of one content are written one at a time and in order, those of different contents
    /// at once. The last part's work also checks the digest. The serial context meanwhile
    /// decodes, asks for more parts and merges, and reads nothing of the download but its length.
    private func appendNext(_ item: AttachmentFetches.Active) {
        guard let data = fetches.nextToAppend(item) else { return }
        let digest = item.download.digest
        let identity = ObjectIdentifier(item)
        let job = PartWrite(item.download)
        partWriter.run({ job.write(data) }) { [weak self] outcome in
            self?.partWritten(digest: digest, identity: identity, count: data.count, outcome: outcome)
        }
    }

    /// A part's write ended: the next one starts, or the content is complete (verified) or
    /// refused. A content given up meanwhile (refused, the session closed) ignores it.
    private func partWritten(digest: AttachmentDigest, identity: ObjectIdentifier, count: Int, outcome: PartWrite.Outcome) {
        guard !isClosed, let item = fetches.active[digest], ObjectIdentifier(item) == identity else { return }
        fetches.appendEnded(item, count: count)
        defer { pumpAttachmentFetches() }
        switch outcome {
        case .written: appendNext(item)
        case .complete: contentVerified(item.download)
        case .mismatch(let reason): refuseContent(item.download, reason: reason)
        case .failed(let error): fail(.store(error))
        }
    }

    /// Every byte was already on disk when the fetch began (a crash before it was published):
    /// verified here, or refused.
    private func completeDownload(_ download: AttachmentDownload) {
        do {
            try download.verify()
        } catch {
            return refuseContent(download, reason: "\(error)")
        }
        contentVerified(download)
    }

    /// The content hashes to its digest: named by it by the next settle write.
    private func contentVerified(_ download: AttachmentDownload) {
        fetches.finished(download.digest, available: true)
        fetches.completed.append(download.digest)
        fetches.verified.append(download)
    }

    /// Content that does not match what the revisions named: discarded, and the revisions
    /// waiting for it are refused (counted and reported as rejected documents).
    private func refuseContent(_ download: AttachmentDownload, reason: String) {
        download.discard()
        fetches.finished(download.digest, available: false)
        logger.warning("attachment content from the peer refused", metadata: ["digest": "\(download.digest)", "reason": "\(reason)"])
        do {
            let documents = try store.refuseAwaiting(digest: download.digest)
            reportDocuments(documents.map { DocumentEvent(kind: .rejected, documentID: $0, detail: "attachment content refused: \(reason)") })
        } catch {
            fail(.store(error))
        }
    }

    /// The peer answered one of our requests with `error`: true when it was an `attachmentGet`
    /// (the content is not asked of this peer again in this session; the revisions naming it
    /// stay set aside, and the owner is told why: `SessionEvent.attachmentUnavailable`).
    func receiveAttachmentError(_ error: ErrorMessage) -> Bool {
        guard let request = fetches.answered(error.requestID) else { return false }
        if let active = fetches.active[request.digest] {
            // The source could not read the content, or found it damaged when the whole did not
            // hash to its digest: the parts it sent before may be damaged too, so they go, and
            // the next fetch starts from the first byte.
            if error.code == .storageFailure { active.download.discard() }
            logger.warning(
                "the peer cannot send attachment content", metadata: ["digest": "\(request.digest)", "code": "\(error.code)", "message": "\(error.message)"])
            fetches.finished(request.digest, available: false)
            onEvent(.attachmentUnavailable(
                "the peer cannot send attachment content \(request.digest) (\(error.code): \(error.message)); "
                    + "the revisions naming it wait, set aside, and it is asked for again within a minute, or at once on the next connection"))
        }
        pumpAttachmentFetches()
        return true
    }

    /// Every `AttachmentFetches.setAsideRecheckSeconds` while the session pulls with attachments:
    /// when it has nothing of its own in progress but the store still holds set-aside revisions,
    /// does what a new connection does (`settleReadyAtStart`, then the waiting list read again),
    /// so a revision whose content is here merges, and one whose content another session set
    /// aside is fetched, whichever session's wake-up did or did not reach it: a node was seen
    /// showing `fetching 1` with the content in its own directory until it restarted. Content
    /// the peer could not send is asked for again every `AttachmentFetches.unavailableRetrySeconds`.
    func scheduleSetAsideRecheck() {
        setAsideRecheckTimer = scheduler.schedule(after: AttachmentFetches.setAsideRecheckSeconds) { [weak self] in
            guard let self, !self.isClosed else { return }
            self.recheckSetAside()
            self.scheduleSetAsideRecheck()
        }
    }

    private func recheckSetAside() {
        guard fetches.isIdle else { return }
        let waiting: Int
        do { waiting = try store.awaitingContentCount() } catch { return fail(.store(error)) }
        guard waiting > 0 else { return }
        // Content the peer could not send is asked for again now and then: it may hold it now.
        if fetches.unavailable.isEmpty {
            unavailableSeenAt = nil
        } else if let seen = unavailableSeenAt, scheduler.now - seen >= AttachmentFetches.unavailableRetrySeconds {
            fetches.forgetUnavailable()
            unavailableSeenAt = nil
        } else if unavailableSeenAt == nil {
            unavailableSeenAt = scheduler.now
        }
        settleReadyAtStart()
        refreshAwaitedAttachments(force: true)
    }

    /// Merges the set-aside revisions whose content is all here already (it arrived from another
    /// peer, or by an upload, while this session was away).
    func settleReadyAtStart() {
        fetches.settleAll = true
        settleCompletedAttachments()
    }

    /// Merges, on the writer, the set-aside revisions the completed content lets through; one
    /// write at a time, each reporting its documents.
    func settleCompletedAttachments() {
        guard !fetches.settling, fetches.settleAll || fetches.settleDue else { return }
        let digests: [AttachmentDigest]? = fetches.settleAll ? nil : fetches.completed
        if fetches.settleAll {
            fetches.settleAll = false
        } else {
            fetches.completed = []
            fetches.publishing = fetches.verified
            fetches.verified = []
        }
        fetches.settling = true
        let store = store
        let policy = configuration.conflictPolicy
        let onEvent = onEvent
        writer.run({ () -> Result<(results: [ForeignDocumentResult], more: Bool), StoreError> in
            do throws(StoreError) {
                // Content verified since the last write is synced once and named, then the
                // revisions waiting for it are merged.
                if let digests { try store.publishDownloads(digests) }
                return .success(try store.settleAwaitingContent(digests: digests, policy: policy, limit: StoreLimits.foreignBatchCountMax))
            } catch {
                return .failure(error)
            }
        }) { [weak self] result in
            guard let self else {
                if case .success(let settled) = result {
                    let events = SubscriptionTarget.events(for: settled.results)
                    if !events.isEmpty { onEvent(.documents(events)) }
                }
                return
            }
            self.fetches.settling = false
            self.fetches.publishing = []
            switch result {
            case .success(let settled):
                self.reportDocuments(SubscriptionTarget.events(for: settled.results))
                if settled.more {
                    if let digests { self.fetches.completed.append(contentsOf: digests) } else { self.fetches.settleAll = true }
                }
                self.onEvent(.progress)
                self.settleCompletedAttachments()
                if self.drainCompletion != nil { self.finishDrainIfIdle() }
            case .failure(let error):
                self.fail(.store(error))
            }
        }
    }
}

/// One part of a download written and hashed on the session's worker. The download is used by
/// one such write at a time (`AttachmentFetches.nextToAppend` holds the next part back until the
/// one before it ended) and by nothing else while it runs, which is what makes handing it to
/// another thread sound.
private final class PartWrite: @unchecked Sendable {
    enum Outcome: Sendable {
        /// Written; more is to come.
        case written
        /// The last byte was written and the whole hashes to the digest.
        case complete
        /// Every byte came and the whole does not hash to the digest (the file is removed).
        case mismatch(String)
        /// The disk refused the write.
        case failed(StoreError)
    }

    private let download: AttachmentDownload

    init(_ download: AttachmentDownload) {
        self.download = download
    }

    func write(_ data: [UInt8]) -> Outcome {
        do {
            try data.withUnsafeBytes { bytes in try download.append(bytes) }
        } catch let error as StoreError {
            return .failed(error)
        } catch {
            return .failed(.attachment("\(error)"))
        }
        guard download.remaining == 0 else { return .written }
        do throws(StoreError) {
            try download.verify()
            return .complete
        } catch {
            return .mismatch("\(error)")
        }
    }
}
