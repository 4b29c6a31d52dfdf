import CanopyAdmin
import CanopyCore
import CanopyReplication
import Dispatch
import Foundation
import Synchronization

/// Replication wiring: what the engine reports goes to the event hub, which is its
/// `ReplicationEventSink` (the agent builds the hub first, then the connection manager, then the
/// controller with the hub as its sink: see `Agent.init`).
extension EventHub: ReplicationEventSink {}

/// What the agent asks of replication beyond its config (`applyConfig` hands that over):
/// one-shot syncs.
extension Agent {
    /// `sync`: a one-shot replication with a peer. With `wait`, the reply comes when it is done
    /// and progress goes out as `sync.progress` events; without, the reply is immediate.
    ///
    /// A client that goes away while it waits (`--timeout`, Ctrl-C) ends the wait at once: the
    /// sync's hold on the peer's replicators goes with it (the replication itself goes on).
    func sync(_ command: Admin.Sync, caller: AdminCaller, _ reply: @escaping TypedAdminRoute<Admin.Sync>.Reply) throws(AdminFailure) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let nodeID = AgentIdentity.normalizeNodeID(command.nodeID), config.peer(nodeID) != nil else {
            throw AdminFailure(.notFound, "\"\(command.nodeID.prefix(80))\" is not a configured peer")
        }
        guard !config.shares(with: nodeID).isEmpty else {
            throw AdminFailure(.notFound, "no database is shared with \(nodeID): nothing to sync (`canopyctl share DB \(nodeID) --access …`)")
        }
        let wait = command.wait ?? false
        let once = ReplyOnce(reply)
        // Without `wait` the reply says it started, before the sync can finish and answer first.
        if !wait { once.reply(.success(.started(.init(nodeID: nodeID)))) }
        let cancellation = runSync(nodeID) { result in
            switch result {
            case .success(let done):
                once.reply(.success(.finished(Self.syncOutcome(nodeID, done))))
            case .failure(let failure):
                let code: AdminErrorCode = failure.code == "unavailable" ? .unavailable : .failed
                once.reply(.failure(AdminFailure(code, failure.message)))
            }
        }
        if wait, case .client(let client, _) = caller { client.onClose { cancellation.cancel() } }
    }

    /// A one-shot replication with a configured peer, as the `sync` command with `wait` runs it
    /// (progress as `sync.progress` events, then `sync.finished` or `sync.failed`), for an
    /// application running the agent in-process. Callable from any queue; `completion` is called
    /// once, on any queue.
    /// Using the returned cancellation (the caller went away) ends the wait: `completion` is
    /// then not called.
    @discardableResult
    package func sync(peer nodeID: String, _ completion: @escaping @Sendable (Result<SyncOutcome, ReplicationFailure>) -> Void) -> SyncCancellation {
        let started = StartedSync()
        queue.async { [self] in
            guard let nodeID = AgentIdentity.normalizeNodeID(nodeID), config.peer(nodeID) != nil else {
                return completion(.failure(ReplicationFailure(code: "unknown_peer", message: "\(nodeID.prefix(80)) is not a configured peer")))
            }
            started.set(runSync(nodeID, completion))
        }
        return SyncCancellation { started.cancel() }
    }

    /// Sets what an in-process application replicates with the peer `nodeID` (a canonical node
    /// id) beyond its config entry, or drops it (nil); see `EngineReplication.setOverrides`.
    /// Callable from any queue; `done` runs once the engine has taken it.
    package func setReplicatorOverrides(
        _ overrides: ReplicatorOverrides?, peer nodeID: String, _ done: @escaping @Sendable () -> Void
    ) {
        guard let engine = replication as? EngineReplication else { return done() }
        engine.setOverrides(overrides, for: nodeID, done: done)
    }

    /// Tells `observer` of every status change of the replication with the peer `nodeID` (a
    /// canonical node id), from its current status when it is configured, until the observation
    /// is cancelled: an application running the agent in-process watches it without polling.
    /// The observer runs on the replication queue and must not block.
    package func observeReplicationStatus(
        peer nodeID: String, _ observer: @escaping @Sendable (PeerStatus) -> Void
    ) -> ReplicationStatusObservation? {
        // The engine is the only controller the agent builds (`init`).
        (replication as? EngineReplication)?.observeStatus(of: nodeID, observer)
    }

    /// Tells `observer` of the document events of the replication with the peer `nodeID` (a
    /// canonical node id) — of `database`, or of every database shared with it when nil — batch
    /// by batch, exactly as and in the order the `events` stream gets them (so without `pushed`:
    /// a peer acknowledges batches, not documents), until the observation is cancelled. The
    /// observer runs on the replication queue and must not block.
    package func observeDocumentEvents(
        peer nodeID: String, database: DatabaseName? = nil, _ observer: @escaping @Sendable (DatabaseName, [DocumentEvent]) -> Void
    ) -> ReplicationStatusObservation? {
        (replication as? EngineReplication)?.observeDocumentEvents(of: nodeID, database: database, observer)
    }

    /// Runs the sync and reports it as events; `nodeID` is a configured peer's canonical id.
    @discardableResult
    private func runSync(_ nodeID: String, _ completion: @escaping @Sendable (Result<SyncOutcome, ReplicationFailure>) -> Void) -> SyncCancellation {
        let progress: @Sendable (ReplicationProgress) -> Void = { [weak events] progress in
            let data = Admin.SyncProgress(nodeID: nodeID, completed: Int64(progress.completed), total: Int64(progress.total))
            events?.emit(data)
        }
        return replication.sync(peer: nodeID, progress: progress) { [weak events] result in
            switch result {
            case .success(let done):
                events?.emit(Self.syncOutcome(nodeID, done))
            case .failure(let failure):
                events?.emit(Admin.SyncFailed(nodeID: nodeID, code: failure.code, message: failure.message))
            }
            completion(result)
        }
    }

    /// A finished sync as the `sync` reply and the `sync.finished` event carry it.
    private static func syncOutcome(_ nodeID: String, _ done: SyncOutcome) -> Admin.SyncOutcome {
        Admin.SyncOutcome(
            nodeID: nodeID, completed: Int64(done.completed), rejected: done.rejected, lastRejection: done.lastRejection,
            received: done.received, sent: done.sent, refusedByPeer: done.refusedByPeer, lastRefusedByPeer: done.lastRefusedByPeer,
            notSharedByPeer: done.notSharedByPeer.keys.sorted().map { .init(db: $0.text, reason: done.notSharedByPeer[$0]!) },
            peerTakesPart: done.peerTakesPart.keys.sorted().map { .init(db: $0.text, peerTakes: done.peerTakesPart[$0]!.summary) })
    }
}

/// A sync started on the agent's queue, for a cancellation that may come before it started (then
/// it is cancelled as it starts).
private final class StartedSync: Sendable {
    private let state = Mutex<(cancellation: SyncCancellation?, cancelled: Bool)>((nil, false))

    func set(_ cancellation: SyncCancellation) {
        let cancelled = state.withLock { state in
            state.cancellation = cancellation
            return state.cancelled
        }
        if cancelled { cancellation.cancel() }
    }

    func cancel() {
        let cancellation = state.withLock { state in
            state.cancelled = true
            return state.cancellation
        }
        cancellation?.cancel()
    }
}

/// Passes on only the first of several replies (a `sync` without `wait` answers "started", and
/// its completion must not answer again).
final class ReplyOnce<Value: Sendable>: Sendable {
    private let pending: Mutex<(@Sendable (Result<Value, AdminFailure>) -> Void)?>

    init(_ reply: @escaping @Sendable (Result<Value, AdminFailure>) -> Void) { pending = Mutex(reply) }

    func reply(_ result: Result<Value, AdminFailure>) {
        let reply = pending.withLock { pending in
            defer { pending = nil }
            return pending
        }
        reply?(result)
    }
}
