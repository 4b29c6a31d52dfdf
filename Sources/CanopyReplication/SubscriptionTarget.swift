import CanopyCore
import CanopyStore
import CanopyWire
import DequeModule

/// The target side of this node's subscription to a peer's changes: answers each `changes` batch
/// with a revision diff, writes the revisions that arrive, and records checkpoints.
///
/// Data model:
///
///     pending   batches received and not yet covered by the checkpoint, oldest first (the
///               source's window bounds it)
///     batch     complete when its `revisions` with `final` were written, or at once if nothing
///               was wanted
///     checkpoint  the last source sequence of the newest batch such that it and every batch
///               before it are complete and durable — written to the local document in the same
///               transaction as the revisions that complete it (alone, for batches that needed
///               nothing), so it is never ahead of the data
///
/// All methods run on the session's serial context; only a `Write`'s `perform` runs elsewhere.
final class SubscriptionTarget {
    struct Batch {
        let requestID: RequestID
        let entries: [ChangesEntry]
        let caughtUp: Bool
        /// True once `revisions` with `final` arrived, or at once if nothing was wanted.
        var complete: Bool
        /// Documents of this batch refused so far, for its acknowledgement.
        var refusals: [RevisionsAck.Refusal] = []
        /// Documents of this batch outside the ids this subscription asked for, and those of
        /// them already refused (their revisions are dropped as they arrive).
        var outOfScope: Set<String> = []
        var refusedOutOfScope: Set<String> = []
    }

    /// What a completed batch changed, for the session to report.
    struct Completion {
        var events: [DocumentEvent] = []
        /// A new checkpoint sequence, when one was recorded.
        var checkpoint: UInt64?
        /// True when the source reported it was caught up and every batch up to that is done.
        var caughtUp = false
    }

    let subscriptionID: RequestID
    let replicationID: [UInt8]
    private let filter: ReplicationFilter
    private let store: any ReplicationStore
    /// Settles the conflicts this subscription's revisions create; nil: the store's policy.
    private let policy: ConflictPolicy?
    private let session: String
    private var checkpoint: ReplicationCheckpoint?
    private var pending: Deque<Batch> = []
    /// The peer accepts acknowledgements that name refused documents (its `hello`'s `refusals`);
    /// without it, refused documents are acknowledged with a plain `ok`, as before the feature.
    private let namesRefusals: Bool
    private(set) var progress = ReplicationProgress()
    private(set) var lastSequence: UInt64

    init(subscriptionID: RequestID, replicationID: [UInt8], filter: ReplicationFilter, store: any ReplicationStore,
         policy: ConflictPolicy? = nil, session: String, since: UInt64, localCheckpoint: ReplicationCheckpoint?,
         namesRefusals: Bool = true) {
        self.namesRefusals = namesRefusals
        self.policy = policy
        self.subscriptionID = subscriptionID
        self.replicationID = replicationID
        self.filter = filter
        self.store = store
        self.session = session
        self.lastSequence = since
        self.checkpoint = localCheckpoint
    }

    /// The checkpoint as last recorded locally.
    var currentCheckpoint: ReplicationCheckpoint? { checkpoint }

    /// A batch of changes from the source: returns the revision diff to send back. A batch that
    /// needed nothing is complete at once; the checkpoint it reaches is written by the session's
    /// next `prepareWrite`. An entry outside an id filter (offered by a peer that ignores the
    /// filter this node subscribed with) is remembered: its revisions are refused as they arrive
    /// (`foreignRevisions`), so the peer learns of the refusal in the batch's acknowledgement.
    func receive(_ changes: Changes) throws(ReplicationError) -> ChangesReply {
        guard changes.subscriptionID == subscriptionID else {
            throw .invalidReference("changes for unknown subscription \(changes.subscriptionID)")
        }
        if let first = changes.entries.first, first.sequence <= lastSequenceReceived {
            throw .invalidReference("changes sequences went backwards (\(first.sequence) after \(lastSequenceReceived))")
        }
        // The diff comes back in the request's order, so the only per-document hashing left is
        // the duplicate check.
        var seen = Set<String>(minimumCapacity: changes.entries.count)
        var offers: [RevisionOffer] = []
        offers.reserveCapacity(changes.entries.count)
        for entry in changes.entries {
            guard seen.insert(entry.docID).inserted else {
                throw .invalidReference("document listed twice in one batch")
            }
            offers.append(RevisionOffer(documentID: entry.docID, revisions: entry.revisions.map(\.id)))
        }
        let diff: [RevsDiffEntry?]
        do { diff = try store.revsDiff(inOrder: offers) } catch { throw .store(error) }
        var items = [ChangesReplyItem](repeating: .complete, count: changes.entries.count)
        var wantsAnything = false
        var outOfScope: Set<String> = []
        for (position, lacking) in diff.enumerated() {
            guard let lacking else { continue }
            let entry = changes.entries[position]
            if !filter.needsBody && !filter.accepts(documentID: entry.docID, body: nil) { outOfScope.insert(entry.docID) }
            let revisions = entry.revisions
            let indices = Self.indices(of: lacking.missing, in: revisions)
            guard !indices.isEmpty else { continue }
            let known = Array(lacking.possibleAncestors.prefix(WireLimits.knownAncestorsMax))
            items[position] = ChangesReplyItem(missing: indices, knownAncestors: known)
            wantsAnything = true
        }
        if let last = changes.entries.last { lastSequenceReceived = last.sequence }
        progress.total += UInt64(changes.entries.count)
        pending.append(Batch(
            requestID: changes.requestID, entries: changes.entries, caughtUp: changes.caughtUp, complete: !wantsAnything, outOfScope: outOfScope))
        return ChangesReply(requestID: changes.requestID, items: items)
    }

    private var lastSequenceReceived: UInt64 = 0

    /// Up to this many missing revisions are looked up by scanning (a document usually lacks one
    /// leaf, and a set per document costs more than the scan); more go through a set, so a peer
    /// offering `entryRevisionsMax` leaves cannot make the lookup quadratic.
    static let missingScanMax = 8

    /// The positions in `revisions` of the revisions in `missing`, ascending.
    static func indices(of missing: [RevisionID], in revisions: [LeafRevision]) -> [Int] {
        if revisions.count == 1 {
            // The usual entry (one leaf, missing when the document is new or changed): a shared
            // array instead of one allocated per document.
            return missing.contains(revisions[0].id) ? ChangesReplyItem.firstOnly : []
        }
        if missing.count <= missingScanMax {
            return revisions.indices.filter { missing.contains(revisions[$0].id) }
        }
        let lookup = Set(missing)
        return revisions.indices.filter { lookup.contains(revisions[$0].id) }
    }

    /// The revisions of one message, to check and write, and the documents refused outright.
    struct Received {
        var revisions: [ForeignRevision]
        /// Documents outside the ids this subscription asked for: the peer may not write them
        /// here (`rejected` events; named in the batch's acknowledgement when the peer accepts
        /// refusals).
        var refused: [DocumentEvent] = []
    }

    /// Revisions for one of our batches, already resolved against it by the connection's state
    /// machine: the revisions to check and write, those a `needsBody` filter rejects left out,
    /// and those of documents outside an id filter refused.
    func foreignRevisions(requestID: RequestID, revisions: [ReceivedRevision]) throws(ReplicationError) -> Received {
        let index = try pendingIndex(requestID)
        var received = Received(revisions: [])
        received.revisions.reserveCapacity(revisions.count)
        for revision in revisions {
            if !pending[index].outOfScope.isEmpty, pending[index].outOfScope.contains(revision.docID) {
                if pending[index].refusedOutOfScope.insert(revision.docID).inserted {
                    let reason = "outside the documents this node lets the peer write (\(filter.identity))"
                    received.refused.append(DocumentEvent(kind: .rejected, documentID: revision.docID, revision: revision.path.leaf, detail: reason))
                    if namesRefusals, pending[index].refusals.count < WireLimits.batchRevisionsMax {
                        pending[index].refusals.append(RevisionsAck.Refusal(
                            documentID: revision.docID, reason: reason.truncatedToUTF8(bytes: WireLimits.errorMessageBytesMax)))
                    }
                }
                continue
            }
            if filter.needsBody && !revision.path.kind.isDeleted {
                let body = try? JSONValue.parse(revision.body)
                if !filter.accepts(documentID: revision.docID, body: body) { continue }
            }
            received.revisions.append(ForeignRevision(
                documentID: revision.docID, path: revision.path, body: .canonical(revision.body), importedID: revision.importedID))
        }
        return received
    }

    /// A `revisions` message whose check passed.
    struct CheckedMessage: Sendable {
        let requestID: RequestID
        let final: Bool
        let batch: CheckedForeignBatch
    }

    /// At most this many revisions are written in one transaction when messages that queued up
    /// while the writer was busy are written together (a single larger message goes alone). A
    /// larger transaction spreads the commit's fixed cost, and the checkpoint's, over more
    /// documents; this bound keeps one transaction's duration (the time the store is held) short,
    /// and the receiver's memory low: a transaction's pages stay in the page cache until it
    /// commits (at 1M documents of 1 KiB the receiver peaked at 59.5 MiB with 4,000, 56.2 with 2,000).
    static let writeGroupRevisionsMax = 2_000

    /// One transaction's worth of checked messages and the checkpoint they reach: made on the
    /// serial context (`prepareWrite`), written wherever the session's writer runs (`perform`,
    /// which touches only the store), and applied on the serial context again (`finish`).
    /// At most one is in flight per target: the checkpoint a write records depends on which
    /// batches the writes before it completed.
    struct Write: Sendable {
        let messages: [CheckedMessage]
        let local: LocalDocument?
        let recorded: RecordedCheckpoint?
        fileprivate let store: any ReplicationStore
        fileprivate let policy: ConflictPolicy?

        /// Writes the group in one transaction with its checkpoint; returns its document events.
        func perform() -> Result<[DocumentEvent], ReplicationError> {
            do throws(ReplicationError) {
                return .success(try SubscriptionTarget.insert(
                    .concatenating(messages.map(\.batch)), local: local, policy: policy, into: store))
            } catch {
                return .failure(error)
            }
        }
    }

    /// A checkpoint about to be written, and the sequence it records.
    struct RecordedCheckpoint: Sendable {
        let sequence: UInt64
        let checkpoint: ReplicationCheckpoint
    }

    /// The write of `messages` (checked, in arrival order, for batches of this target) in one
    /// transaction, with the checkpoint the group reaches — found before writing: it depends only
    /// on which batches the group completes. With no messages: the checkpoint alone that batches
    /// already complete reach; a write of nothing when batches at the head only wait to be popped
    /// (`headIsSettled`); nil when there is nothing to do.
    func prepareWrite(_ messages: [CheckedMessage]) throws(ReplicationError) -> Write? {
        var completing: [Int] = []
        for message in messages {
            let index = try pendingIndex(message.requestID)
            if message.final { completing.append(index) }
        }
        let recorded = checkpointSequence(completing: completing).map { RecordedCheckpoint(sequence: $0, checkpoint: recording($0)) }
        guard !messages.isEmpty || recorded != nil || headIsSettled else { return nil }
        var local: LocalDocument?
        if let recorded {
            do { local = try LocalDocument(ReplicationIdentity.checkpointDocumentID(replicationID), body: recorded.checkpoint.json) } catch {
                throw .store(error)
            }
        }
        return Write(messages: messages, local: local, recorded: recorded, store: store, policy: policy)
    }

    /// A write that committed with `events`: the batches it completed are popped and its
    /// checkpoint becomes current; returns the acknowledgement of every message marked final.
    /// Documents refused in the write are named in their batch's acknowledgement.
    func finish(_ write: Write, events: [DocumentEvent]) -> (acks: [RevisionsAck], completion: Completion) {
        if namesRefusals && events.contains(where: { $0.kind == .rejected }) { noteRefusals(events, in: write) }
        var acks: [RevisionsAck] = []
        for message in write.messages where message.final {
            guard let index = pending.firstIndex(where: { $0.requestID == message.requestID }) else { continue }
            pending[index].complete = true
            let refusals = pending[index].refusals
            acks.append(RevisionsAck(requestID: message.requestID, status: refusals.isEmpty ? .ok : .okWithRefusals(refusals)))
        }
        var completion = popCompleted(recorded: write.recorded)
        completion.events = events
        return (acks, completion)
    }

    /// Records each refused document with the batch (among the write's) whose entries name it;
    /// at most `batchRevisionsMax` per batch, reasons cut to the wire's message limit.
    private func noteRefusals(_ events: [DocumentEvent], in write: Write) {
        let requests = Set(write.messages.map(\.requestID))
        for event in events where event.kind == .rejected {
            guard let index = pending.firstIndex(where: { batch in
                requests.contains(batch.requestID) && batch.entries.contains { $0.docID == event.documentID }
            }), pending[index].refusals.count < WireLimits.batchRevisionsMax,
                !event.documentID.isEmpty, event.documentID.utf8.count <= WireLimits.docIDBytesMax
            else { continue }
            let reason = (event.detail ?? "refused").truncatedToUTF8(bytes: WireLimits.errorMessageBytesMax)
            pending[index].refusals.append(RevisionsAck.Refusal(documentID: event.documentID, reason: reason))
        }
    }

    /// A message whose check failed as a whole (a problem that names no document, or a batch
    /// too large): a protocol violation, and nothing of it is written.
    func refuse(requestID: RequestID, problem: StoreInputError) throws(ReplicationError) -> Never {
        _ = try pendingIndex(requestID)
        throw .protocolViolation(.invalidDocument(detail: "\(problem)"))
    }

    /// The position in `pending` of our incomplete batch `requestID`.
    private func pendingIndex(_ requestID: RequestID) throws(ReplicationError) -> Int {
        guard let index = pending.firstIndex(where: { $0.requestID == requestID }), !pending[index].complete else {
            throw .invalidReference("revisions for unknown request \(requestID)")
        }
        return index
    }

    /// Writes received revisions in one transaction. A document that fails the store's checks (a
    /// revision id that is not the hash of its content, a body that is not a canonical JSON
    /// object, a broken history) is left out and reported as `rejected`, and the rest of the batch
    /// is written: one bad document must not stall replication of everything after it. (Revisions
    /// whose ids were imported from CouchDB arrive marked `importedID` and are not hash-checked.)
    /// The rejected document is not retried (its sequence is checkpointed past), as
    /// CouchDB counts a `doc_write_failure` and moves on. A problem that names no document is a
    /// protocol violation.
    /// `local` (the checkpoint) is written in the same transaction, also when every document was
    /// rejected.
    private static func insert(
        _ batch: CheckedForeignBatch, local: LocalDocument?, policy: ConflictPolicy?, into store: any ReplicationStore
    ) throws(ReplicationError) -> [DocumentEvent] {
        var events = batch.rejected.map { problem in
            DocumentEvent(kind: .rejected, documentID: problem.documentID ?? "", detail: "\(problem)")
        }
        var remaining = batch
        while !remaining.isEmpty || local != nil {
            do {
                let results = try store.bulkInsertForeign(checked: remaining, local: local, policy: policy)
                // Usually nothing was rejected: the batch's events are returned as made, not
                // copied behind an empty array (a retain and a release per event).
                if events.isEmpty { return Self.events(for: results) }
                return events + Self.events(for: results)
            } catch .invalidInput(let problem) {
                guard let documentID = problem.documentID else {
                    throw .protocolViolation(.invalidDocument(detail: "\(problem)"))
                }
                events.append(DocumentEvent(kind: .rejected, documentID: documentID, detail: "\(problem)"))
                let before = remaining.count
                remaining = remaining.removing(documentID: documentID)
                guard remaining.count < before else { throw .protocolViolation(.invalidDocument(detail: "\(problem)")) }
            } catch {
                throw .store(error)
            }
        }
        return events
    }

    /// True while batches received have not completed.
    var hasBatchesInFlight: Bool { !pending.isEmpty }

    /// True when no batch is outstanding.
    var isDrained: Bool { pending.isEmpty }

    /// The sequence the checkpoint reaches once the batches at the `pending` positions
    /// `completing` are complete too — the last sequence of the newest batch such that it and
    /// every batch before it are complete — or nil when that is not beyond `lastSequence`.
    private func checkpointSequence(completing: [Int]) -> UInt64? {
        var reached: UInt64?
        for (index, batch) in pending.enumerated() {
            guard batch.complete || completing.contains(index) else { break }
            if let last = batch.entries.last { reached = last.sequence }
        }
        guard let reached, reached > lastSequence else { return nil }
        return reached
    }

    /// The checkpoint with `sequence` recorded for this session.
    private func recording(_ sequence: UInt64) -> ReplicationCheckpoint {
        checkpoint?.recording(session: session, sequence: sequence)
            ?? ReplicationCheckpoint(current: .init(session: session, sequence: sequence))
    }

    /// True when the batch at the head is complete and the recorded checkpoint covers it: it
    /// only waits to be popped (a batch without entries, or one that completed after the
    /// checkpoint that covers it was found).
    private var headIsSettled: Bool {
        guard let head = pending.first, head.complete else { return false }
        return (head.entries.last?.sequence ?? 0) <= lastSequence
    }

    /// Records `recorded`, the checkpoint just written, then pops the complete batches at the head
    /// that the checkpoint covers. A batch that completed while the write was in flight (it needed
    /// nothing) stays until a checkpoint covers it, so neither it nor `caughtUp` is reported
    /// before its sequence is durable.
    private func popCompleted(recorded: RecordedCheckpoint?) -> Completion {
        var completion = Completion()
        if let recorded {
            lastSequence = recorded.sequence
            checkpoint = recorded.checkpoint
            completion.checkpoint = recorded.sequence
        }
        while headIsSettled, let head = pending.popFirst() {
            progress.completed += UInt64(head.entries.count)
            if head.caughtUp && pending.isEmpty { completion.caughtUp = true }
        }
        return completion
    }

    static func events(for results: [ForeignDocumentResult]) -> [DocumentEvent] {
        var events: [DocumentEvent] = []
        events.reserveCapacity(results.count)
        for result in results where !result.alreadyKnown || result.resolution != .notConflicted {
            if !result.alreadyKnown {
                events.append(DocumentEvent(
                    kind: .pulled, documentID: result.documentID, revision: result.current, deleted: result.currentIsDeleted))
            }
            events.append(contentsOf: DocumentEvent.conflictEvents(for: result))
        }
        return events
    }
}
