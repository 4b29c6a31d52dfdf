import CanopyCore
import CanopyStore
import CanopyWire

/// The push side of a session (this node is the source): drives `Pusher`, and keeps the
/// checkpoints the peer stores here.
extension ReplicationSession {

    var outbox: Pusher.Outbox { Pusher.Outbox(nextRequestID: allocateRequestID, send: send) }

    func receiveSubscribe(_ subscribe: Subscribe) throws(ReplicationError) {
        // ConnectionStateMachine delivers nothing before the peer's hello.
        guard let hello = peerHello else { throw .invalidReference("subscribe before hello") }
        if holdsPeerSubscriptions {
            guard heldSubscribes.count < WireLimits.subscriptionsMax else {
                throw .protocolViolation(.windowExceeded(what: "subscriptions", limit: WireLimits.subscriptionsMax))
            }
            return heldSubscribes.append(subscribe)
        }
        reportPush(try pusher.subscribe(
            subscribe, peerWindow: hello.window, marksImportedIDs: hello.features & Hello.importedIDsFeature != 0,
            pumping: drainCompletion == nil, outbox))
    }

    /// This node's pull caught up (or was refused): the peer's subscriptions held until then
    /// (`holdsPeerSubscriptions`) are served now, in the order they came.
    func releaseHeldSubscribes() {
        guard !heldSubscribes.isEmpty, !holdsPeerSubscriptions, !isClosed else { return }
        let held = heldSubscribes
        heldSubscribes = []
        do {
            for subscribe in held { try receiveSubscribe(subscribe) }
        } catch {
            fail(error)
        }
    }

    func receiveUnsubscribe(_ unsubscribe: Unsubscribe) throws(ReplicationError) {
        if let index = heldSubscribes.firstIndex(where: { $0.requestID == unsubscribe.subscriptionID }) {
            heldSubscribes.remove(at: index)
            return
        }
        reportPush(try pusher.unsubscribe(unsubscribe, pumping: drainCompletion == nil, outbox))
    }

    func receiveChangesReply(_ reply: ChangesReply) throws(ReplicationError) {
        reportPush(try pusher.receive(reply, pumping: drainCompletion == nil, outbox))
        onEvent(.progress)
    }

    func receiveRevisionsAck(_ ack: RevisionsAck) throws(ReplicationError) {
        reportPush(try pusher.receive(ack, pumping: drainCompletion == nil, outbox))
        onEvent(.progress)
    }

    func localChangesCommitted() {
        guard !isClosed else { return }
        do { reportPush(try pusher.localChangesCommitted(pumping: drainCompletion == nil, outbox)) } catch { fail(error) }
    }

    /// Reports what a push step did; a draining session closes once nothing is in flight. Any
    /// step may be the one that drains the push (a revisions ack, or a changes reply saying the
    /// peer holds the whole batch, as it does for revisions just pulled from it), so each may
    /// start a one-shot pass's confirmation pull.
    func reportPush(_ report: Pusher.Report) {
        reportDocuments(report.documents)
        startConfirmationPullIfDue()
        if report.completed { onEvent(.pushCompleted) }
        if drainCompletion != nil { finishDrainIfIdle() }
    }

    // MARK: Checkpoints the peer keeps here

    var keeper: PeerCheckpointKeeper {
        PeerCheckpointKeeper(store: store, peerHorizonKey: configuration.peerHorizonKey, checkpointsMax: configuration.peerCheckpointsMax)
    }

    func answerCheckpointGet(_ get: CheckpointGet) throws(ReplicationError) {
        send(try keeper.answer(get))
    }

    func storeRemoteCheckpoint(_ set: CheckpointSet) throws(ReplicationError) {
        let (answer, horizon) = try keeper.store(set, acknowledged: pusher.acknowledgedSequence)
        if let horizon, let ready = horizonBarrier.arrived(horizon) { try keeper.record(ready) }
        send(answer)
    }

    /// `count` received `revisions` messages were written: records the peer horizons that waited
    /// for them (`PeerHorizonBarrier`).
    func receivedRevisionsWritten(_ count: Int) throws(ReplicationError) {
        for horizon in horizonBarrier.revisionsWritten(count) { try keeper.record(horizon) }
    }

    func receiveError(_ error: ErrorMessage) throws(ReplicationError) {
        if let reason = puller.receive(error) {
            // A refused pull is a configuration the peer chose (it does not push to us), not a
            // broken connection: the push direction goes on, and the refusal is reported.
            logger.warning("the peer refused to be pulled from", metadata: ["code": "\(error.code)", "message": "\(error.message)"])
            onEvent(.pullRefused(reason))
            releaseHeldSubscribes()
        } else {
            logger.warning("peer reported an error", metadata: ["code": "\(error.code)", "message": "\(error.message)"])
        }
        // A refused checkpoint copy is no longer in flight: a draining session may be done.
        if drainCompletion != nil { finishDrainIfIdle() }
    }
}
