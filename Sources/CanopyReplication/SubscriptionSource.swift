import CanopyCore
import CanopyStore
import CanopyWire
import DequeModule

/// The source side of one subscription: streams this node's changes feed to a subscribed peer.
///
/// Data model:
///
///     cursor     the last local sequence read from the changes feed
///     inFlight   batches sent and not yet complete, oldest first, at most `window`
///     batch      awaitingReply → (nothing missing: complete)
///                             → sendingRevisions (one or more `revisions` messages) → complete
///                               when every message was acknowledged
///
/// The source keeps no checkpoint of its own making: the target decides what is durable and sends
/// `checkpointSet`, which the session stores. All methods run on the session's serial context.
final class SubscriptionSource {
    /// One `changes` batch in flight.
    struct Batch {
        let requestID: RequestID
        let entries: [ChangesEntry]
        /// Each entry's `Change.documentKey`, for the revisions requested later.
        let documentKeys: [Int64]
        /// 1 while the `revisionsAck` for this batch's revisions is outstanding.
        var unacknowledged = 0
        /// True once the `changesReply` arrived.
        var replied = false
        /// Documents whose revisions this batch sent (for `pushed` events).
        var sentDocuments: [(String, RevisionID)] = []
    }

    let subscriptionID: RequestID
    let continuous: Bool
    /// What this node pushes and what the peer asked for: a document is served when both accept it.
    private let filters: [ReplicationFilter]
    private let store: any ReplicationStore
    private let batchSize: Int
    private let window: Int
    /// The peer accepts revisions marked as having imported ids (its `hello`'s `importedIDs`).
    private let marksImportedIDs: Bool
    private var cursor: Int64
    private var inFlight: Deque<Batch> = []
    /// The feed was read to its end and the peer was told (`caughtUp`); waiting for commits.
    private var caughtUpSent = false
    /// True when a one-shot subscription has sent its last batch.
    private(set) var finishedSending = false
    private(set) var progress = ReplicationProgress()
    /// The sequence of the newest batch the peer completed, with every batch before it.
    private(set) var acknowledgedSequence: UInt64

    init(
        subscribe: Subscribe, serving pushFilter: ReplicationFilter, store: any ReplicationStore, batchSize: Int, window: Int,
        marksImportedIDs: Bool = true, honoursSubscription: Bool = true
    ) {
        subscriptionID = subscribe.requestID
        continuous = subscribe.continuous
        // Not honouring the subscription (`ReplicationConfiguration.servesBeyondSubscriptions`,
        // a test of receivers) leaves only this node's own filter.
        let asked = honoursSubscription ? ReplicationFilter(wire: subscribe.filter) : .all
        filters = [pushFilter, asked].filter { if case .all = $0 { false } else { true } }
        self.store = store
        self.batchSize = batchSize
        self.window = window
        self.marksImportedIDs = marksImportedIDs
        cursor = Int64(clamping: subscribe.since)
        acknowledgedSequence = subscribe.since
    }

    /// True if `requestID` names one of this source's batches in flight.
    func owns(_ requestID: RequestID) -> Bool {
        inFlight.contains { $0.requestID == requestID }
    }

    /// True while batches sent have not completed.
    var hasBatchesInFlight: Bool { !inFlight.isEmpty }

    /// True when every batch sent was completed and, for a continuous subscription, the changes
    /// feed has nothing this source has not read (a commit whose notification is still on its way
    /// counts as work).
    var isDrained: Bool {
        inFlight.isEmpty && (finishedSending || cursor >= store.lastSequence)
    }

    /// Reads the changes feed and sends batches while the window has room.
    /// `nextRequestID` allocates request ids; `send` queues messages.
    func pump(nextRequestID: () -> RequestID, send: (Message) -> Void) throws(StoreError) {
        while inFlight.count < window && !finishedSending {
            // A damaged row is left out of the page (the store reports it) and passed over.
            let page = try store.changesPage(since: cursor, limit: batchSize)
            let reachedEnd = page.reachedEnd
            if let last = page.lastSequence { cursor = last }
            var entries: [ChangesEntry] = []
            var documentKeys: [Int64] = []
            entries.reserveCapacity(page.changes.count)
            documentKeys.reserveCapacity(page.changes.count)
            for change in page.changes {
                if let entry = try entry(for: change) {
                    entries.append(entry)
                    documentKeys.append(change.documentKey)
                }
            }
            if entries.isEmpty && reachedEnd && caughtUpSent { return }
            if entries.isEmpty && !reachedEnd { continue }
            let requestID = nextRequestID()
            send(.changes(Changes(requestID: requestID, subscriptionID: subscriptionID, caughtUp: reachedEnd, entries: entries)))
            inFlight.append(Batch(requestID: requestID, entries: entries, documentKeys: documentKeys))
            progress.total += UInt64(entries.count)
            caughtUpSent = reachedEnd
            if reachedEnd {
                if !continuous { finishedSending = true }
                return
            }
        }
    }

    /// The peer unsubscribed: send nothing new; batches in flight still complete.
    func stopSending() {
        finishedSending = true
    }

    /// New local commits: the next `pump` reads them.
    func localChangesCommitted() {
        caughtUpSent = false
    }

    /// The peer's revision diff for one of our batches. Returns documents pushed when the batch
    /// completes at once (nothing missing).
    func receive(_ reply: ChangesReply, send: (Message) -> Void) throws(ReplicationError) -> [DocumentEvent] {
        guard let index = inFlight.firstIndex(where: { $0.requestID == reply.requestID }), !inFlight[index].replied else {
            throw .invalidReference("changesReply for unknown request \(reply.requestID)")
        }
        let entries = inFlight[index].entries
        guard reply.items.count == entries.count else {
            throw .invalidReference("changesReply has \(reply.items.count) items for \(entries.count) entries")
        }
        inFlight[index].replied = true
        // One request per document that lacks something, read in place by index below (a
        // `for request in` copy would retain and release its id and arrays per document).
        var requests: [RevisionRequest] = []
        requests.reserveCapacity(reply.items.count)
        for (entryIndex, item) in reply.items.enumerated() where !item.missing.isEmpty {
            let entry = entries[entryIndex]
            guard item.missing.allSatisfy({ entry.revisions.indices.contains($0) }) else {
                throw .invalidReference("changesReply asks for a revision index beyond entry \(entryIndex)")
            }
            requests.append(RevisionRequest(
                documentID: entry.docID, revisions: item.missing.map { entry.revisions[$0].id },
                knownAncestors: item.knownAncestors, documentKey: inFlight[index].documentKeys[entryIndex]))
        }
        var messages = RevisionsMessageBuilder(requestID: reply.requestID)
        // One store call for the whole batch; if a document changed or was compacted since the
        // batch was read, fall back to one call per document and skip what can no longer be
        // supplied (the next batch carries its newer revisions).
        // A batch the peer already holds whole needs no read at all.
        let batched = requests.isEmpty ? [] : try? revisionsToSend(requests)
        var offset = 0
        for position in requests.indices {
            let count = requests[position].revisions.count
            // A slice of the batch's answer, not an array per document.
            let outgoing: ArraySlice<ForeignRevision>
            if let batched {
                outgoing = batched[offset..<offset + count]
                offset += count
            } else if let single = try? revisionsToSend([requests[position]]) {
                outgoing = single[...]
            } else {
                for _ in 0..<count { messages.skip() }
                continue
            }
            for revision in outgoing {
                messages.append(RevisionsMessageBuilder.transfer(
                    for: revision, knownAncestors: requests[position].knownAncestors, marksImportedID: marksImportedIDs))
                inFlight[index].sentDocuments.append((requests[position].documentID, revision.path.leaf))
            }
        }
        let built = messages.finish(sendEmpty: !requests.isEmpty)
        for message in built { send(.revisions(message)) }
        // The target acknowledges a request once, after the message marked final.
        inFlight[index].unacknowledged = built.isEmpty ? 0 : 1
        return completeFinishedBatches()
    }

    /// The peer acknowledged the batch's revisions (one ack, after the final message).
    func receive(_ ack: RevisionsAck) throws(ReplicationError) -> [DocumentEvent] {
        guard let index = inFlight.firstIndex(where: { $0.requestID == ack.requestID }), inFlight[index].unacknowledged > 0 else {
            throw .invalidReference("revisionsAck for unknown request \(ack.requestID)")
        }
        var refused: [DocumentEvent] = []
        switch ack.status {
        case .ok: break
        case .rejected(let code, let message):
            throw .peerRejected("the peer rejected revisions: \(code) \(message)")
        case .okWithRefusals(let refusals):
            // Those documents are not on the peer: reported, and not `pushed`.
            let names = Set(refusals.map(\.documentID))
            inFlight[index].sentDocuments.removeAll { names.contains($0.0) }
            refused = refusals.map { DocumentEvent(kind: .refusedByPeer, documentID: $0.documentID, detail: $0.reason) }
        }
        inFlight[index].unacknowledged -= 1
        let completed = completeFinishedBatches()
        return refused.isEmpty ? completed : refused + completed
    }

    /// Removes completed batches from the head of the window, returning `pushed` events.
    private func completeFinishedBatches() -> [DocumentEvent] {
        var events: [DocumentEvent] = []
        while let head = inFlight.first, head.replied, head.unacknowledged == 0 {
            inFlight.removeFirst()
            progress.completed += UInt64(head.entries.count)
            if let last = head.entries.last { acknowledgedSequence = max(acknowledgedSequence, last.sequence) }
            events += head.sentDocuments.map { DocumentEvent(kind: .pushed, documentID: $0.0, revision: $0.1) }
        }
        return events
    }

    /// The store's revisions for `requests`, each with every link of its history this store holds
    /// (the peer stems to its own limit), reaching a revision the peer named however deep (§6.6).
    private func revisionsToSend(_ requests: [RevisionRequest]) throws(StoreError) -> [ForeignRevision] {
        try store.revisionsToSend(requests, revsLimit: WireLimits.revsLimitMax, knownAncestorReach: WireLimits.revsLimitMax)
    }

    /// The changes entry for a document, or nil when a filter excludes it. Each filter is asked
    /// on its own, so an id filter holds for deletions too (a predicate passes every deletion).
    private func entry(for change: Change) throws(StoreError) -> ChangesEntry? {
        var body: JSONValue??
        for filter in filters {
            if filter.needsBody && !change.deleted {
                if body == nil { body = .some((try? store.get(id: change.documentID, options: []))?.body) }
                guard filter.accepts(documentID: change.documentID, body: body!) else { return nil }
            } else {
                guard filter.accepts(documentID: change.documentID, body: nil) else { return nil }
            }
        }
        let leaves = change.leaves.prefix(WireLimits.entryRevisionsMax).map { LeafRevision(id: $0.revision, kind: $0.kind) }
        return ChangesEntry(sequence: UInt64(change.sequence), docID: change.documentID, revisions: Array(leaves))
    }
}
