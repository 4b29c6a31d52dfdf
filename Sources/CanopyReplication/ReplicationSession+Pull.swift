import CanopyCore
import CanopyStore
import CanopyWire

/// The pull side of a session (this node is the target): drives `Puller`, runs its writes on the
/// writer, and reports what they completed.
extension ReplicationSession {

    /// Starts another pass of a one-shot pull on this connection (`sync` on a `once` peer whose
    /// last pass finished): a fresh `checkpointGet` and `subscribe` from the checkpoint. Does
    /// nothing while a subscription is still active, when this node does not pull, or when the
    /// peer refused to be pulled from.
    public func pullAgain() {
        scheduler.assertOnContext()
        guard !isClosed, configuration.direction.pulls, peerDatabaseID != nil, puller.canStartAnotherPass else { return }
        puller.resetForAnotherPass()
        do { try beginPull() } catch { fail(error) }
    }

    func beginPull() throws(ReplicationError) {
        guard let peerHello else { return }
        try puller.begin(
            peerDatabaseID: peerHello.databaseID, namesRefusals: peerHello.features & Hello.refusalsFeature != 0, outbox)
    }

    func receiveCheckpoint(_ checkpoint: Checkpoint) throws(ReplicationError) {
        let since = try puller.receive(checkpoint, session: random.nextHexID(), outbox)
        // Where the pull resumes is where it stands, before any batch: reported now, so a node
        // that restarts caught up does not show an unknown pull checkpoint until the next change.
        if since > 0 { onEvent(.pullCheckpoint(since)) }
    }

    func receiveChanges(_ changes: Changes) throws(ReplicationError) {
        try puller.receive(changes, outbox)
        // A batch that needed nothing is complete: the checkpoint it reaches is written next.
        writeNext()
        onEvent(.progress)
    }

    /// Hands a message's revisions to the check pipeline; they are written, in arrival order,
    /// when checked (at once with the inline worker).
    func receiveRevisions(requestID: RequestID, final: Bool, revisions: [ReceivedRevision]) throws(ReplicationError) {
        horizonBarrier.revisionsReceived()
        let received = try puller.foreignRevisions(requestID: requestID, revisions: revisions)
        reportDocuments(received.refused)
        checks.submit(requestID: requestID, final: final, revisions: received.revisions)
    }

    /// Checked messages, in arrival order: they wait for the writer.
    func writeChecked(_ group: [RevisionCheckPipeline.Checked]) {
        puller.checked(group)
        writeNext()
    }

    /// Unless a write is in flight, hands the writer the next transaction (`Puller.nextWrite`).
    /// A batch's last message is acknowledged after its transaction committed.
    func writeNext() {
        guard !isClosed, let target = puller.target else { return }
        do throws(ReplicationError) {
            guard let write = try puller.nextWrite() else { return }
            let writtenTarget = ObjectIdentifier(target)
            // A session released before its write finished (its replicator stopped and gone)
            // still reports what the write committed: nothing else would.
            let onEvent = onEvent
            writer.run({ write.perform() }) { [weak self] result in
                guard let self else {
                    if case .success(let events) = result, !events.isEmpty { onEvent(.documents(events)) }
                    return
                }
                self.written(write, result: result, for: writtenTarget)
            }
        } catch {
            fail(error)
        }
    }

    /// The writer finished `write`: acknowledge, report, and start the next one. A session
    /// closed meanwhile sends nothing more; what committed stays (the checkpoint with it), and
    /// the peer sends the unacknowledged batches again next time. Its document events are still
    /// reported: the checkpoint moved past those documents, so nothing would report them later.
    func written(
        _ write: SubscriptionTarget.Write, result: Result<[DocumentEvent], ReplicationError>, for writtenTarget: ObjectIdentifier
    ) {
        guard !isClosed else {
            if case .success(let events) = result { reportDocuments(events) }
            return puller.writeAbandoned()
        }
        switch result {
        case .success(let events):
            let completion = puller.written(write, events: events, writtenFor: writtenTarget, outbox)
            do { try receivedRevisionsWritten(write.messages.count) } catch { return fail(error) }
            // A write for a subscription replaced meanwhile (a one-shot sync's confirmation pull)
            // completes nothing, but what it wrote still happened.
            guard let completion else { return reportDocuments(events) }
            // Before the completion is reported: a one-shot sync must see the fetches the
            // write made necessary as work still to do.
            refreshAwaitedAttachments()
            report(completion)
            writeNext()
        case .failure(let error):
            puller.writeAbandoned()
            // The target is not replaced while its batches are pending: the failure is this one's.
            if let target = puller.target, ObjectIdentifier(target) == writtenTarget { fail(error) }
        }
    }

    func report(_ completion: SubscriptionTarget.Completion) {
        reportDocuments(completion.events)
        if let sequence = completion.checkpoint { onEvent(.pullCheckpoint(sequence)) }
        if completion.caughtUp {
            releaseHeldSubscribes()
            onEvent(.pullCaughtUp)
            startConfirmationPullIfDue()
        }
        // Once per batch, so observers refresh progress and idleness here and not per document.
        onEvent(.progress)
        if drainCompletion != nil { finishDrainIfIdle() }
    }

    /// Reports a batch's document events as one `.documents` event, in their order; nothing when
    /// there are none.
    func reportDocuments(_ events: [DocumentEvent]) {
        if !events.isEmpty { onEvent(.documents(events)) }
    }

    /// The peer stored our checkpoint: send the newest one if batches completed meanwhile.
    func receiveCheckpointSetAck() {
        puller.checkpointCopyAcknowledged(outbox)
        if drainCompletion != nil { finishDrainIfIdle() }
    }
}
