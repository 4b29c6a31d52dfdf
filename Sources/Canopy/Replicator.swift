import CanopyAgent
import CanopyReplication
import CanopyWire
import Synchronization

/// Replication between a `Node` and one peer, shaped after Couchbase Lite's `Replicator`:
/// `start()` and `stop()`, a one-shot `sync()` that returns when both directions have caught up,
/// and the replicator's activity as an `AsyncSequence` of `Status` values; what it did to each
/// document is another (`documentEvents`).
///
/// ```swift
/// let replicator = node.replicator(ReplicatorConfiguration(peer: otherID, address: "10.0.0.2:4987"))
/// let status = replicator.status
/// replicator.start()
/// for await state in status where state == .idle { break }   // caught up
/// ```
///
/// Starting writes the peer into the node's config file as `canopyctl peer add` does (allowed,
/// and dialled when the configuration has an address), so the node's agent replicates with it
/// from then on, across restarts too; releasing the replicator does not stop that. `stop()`
/// removes the entry again, as `canopyctl peer remove` does: the peer is then neither dialled
/// nor allowed. Status comes from the agent's replication engine as it changes, without
/// polling.
///
/// Thread safety: every member may be used from any thread or task; the state is behind one
/// lock.
public final class Replicator: Sendable {
    /// The replicator's activity, as Couchbase Lite's and Cloudant's replicators report it.
    public enum Status: Sendable, Equatable {
        /// Not running: never started, or stopped (the last value of every status stream).
        case stopped
        /// The peer cannot be reached (or, for a replicator that only accepts, has not
        /// connected yet); a dialling replicator retries with backoff.
        case offline
        /// Dialling the peer or in the handshake.
        case connecting
        /// Continuous and caught up in every direction it replicates: waiting for new changes.
        case idle
        /// Transferring changes: entries completed of those known so far, both directions
        /// together (the total grows as the changes feeds reveal more).
        case busy(ReplicationProgress)
        /// One-shot and its pass finished: both directions caught up.
        case completed
        /// Failed without retrying: the peer broke the protocol, or the configuration could not
        /// be applied. `start()` or `sync()` tries again.
        case failed(ReplicatorError)
    }

    /// What a completed `sync()` did.
    public struct SyncOutcome: Sendable, Equatable {
        /// Changes entries handled, both directions together (entries the other side already
        /// had count too: each was checked).
        public var completed: UInt64
        /// Documents from the peer this node refused (a rule or validation said no).
        public var rejected: Int64
        /// Documents this node sent that the peer refused.
        public var refusedByPeer: Int64
        /// Documents written on this node from the peer during this sync.
        public var received: Int64
        /// Documents of this node the peer stored during this sync.
        public var sent: Int64
        /// Databases shared with the peer that it does not share with this node (it refused
        /// them): nothing of them replicated, either way. Sorted.
        public var notSharedByPeer: [String]
        /// Databases this node pushes of which the peer takes only part — `nothing` (it does not
        /// pull them from this node) or `ids starting P` — by name: what this node writes outside
        /// of that stays here.
        public var peerTakesPart: [String: String]

        /// Creates an outcome.
        public init(
            completed: UInt64, rejected: Int64 = 0, refusedByPeer: Int64 = 0, received: Int64 = 0, sent: Int64 = 0,
            notSharedByPeer: [String] = [], peerTakesPart: [String: String] = [:]
        ) {
            self.completed = completed
            self.received = received
            self.sent = sent
            self.rejected = rejected
            self.refusedByPeer = refusedByPeer
            self.notSharedByPeer = notSharedByPeer
            self.peerTakesPart = peerTakesPart
        }
    }

    /// With which peer, which way, and where to reach it.
    public let configuration: ReplicatorConfiguration

    /// A status stream keeps at most this many values a slow reader has not taken yet, dropping
    /// the oldest: the newest status is never lost, and a reader that never reads costs a
    /// bounded amount of memory while a transfer reports progress.
    static let statusBufferCount = 64
    /// A document event stream keeps at most this many events a slow reader has not taken yet,
    /// dropping the oldest: a reader that never reads costs a bounded amount of memory while a
    /// large database replicates.
    static let documentEventBufferCount = 4096

    private let agent: Agent
    /// The peer's entry in the node's config, or why the configuration cannot make one.
    private let peer: Result<PeerConfig, ReplicatorError>
    private let state = Mutex(State())

    /// Whether the replicator runs, its last status and who is told of the next.
    private struct State {
        var current: Status = .stopped
        /// Why the replication of `default` with the peer last failed, as the engine said it.
        var lastError: String?
        var running = false
        /// Bumped by each start and stop: reports from an earlier run are dropped.
        var generation = 0
        var observation: ReplicationStatusObservation?
        var streams: [Int: AsyncStream<Status>.Continuation] = [:]
        /// The document event streams, each with the agent's observation that feeds it.
        var documentStreams: [Int: (stream: AsyncStream<ReplicatedDocument>.Continuation, observation: ReplicationStatusObservation?)] = [:]
        var nextStream = 0
    }

    init(configuration: ReplicatorConfiguration, agent: Agent) {
        self.configuration = configuration
        self.agent = agent
        peer = Self.peerConfig(configuration)
    }

    deinit {
        let (streams, documentStreams) = state.withLock { state in
            defer {
                state.streams = [:]
                state.documentStreams = [:]
            }
            return (Array(state.streams.values), Array(state.documentStreams.values))
        }
        for stream in streams { stream.finish() }
        for (stream, observation) in documentStreams {
            observation?.cancel()
            stream.finish()
        }
    }

    /// The replicator's status from now on: the current one first, then every change, until
    /// `stop()` (which sends `.stopped` and ends the stream). Each access makes a new stream;
    /// take it before `start()` to see every state from the first.
    public var status: AsyncStream<Status> {
        let (stream, continuation) = AsyncStream.makeStream(
            of: Status.self, bufferingPolicy: .bufferingNewest(Self.statusBufferCount))
        let key = state.withLock { state in
            let key = state.nextStream
            state.nextStream += 1
            state.streams[key] = continuation
            continuation.yield(state.current)
            return key
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.streams.removeValue(forKey: key) }
        }
        return stream
    }

    /// What replication does to documents from now on, one value per document and event, in the
    /// order it happened (all the databases shared with the peer, each value naming its own):
    /// documents pulled from the peer, conflicts their arrival caused and how the conflict policy
    /// dealt with them, documents refused by this node or by the peer. Documents pushed are not
    /// reported one by one (see ``ReplicatedDocument``). The stream ends at `stop()`. Each access
    /// makes a new stream that sees the events from then on; take it before `start()` to see
    /// every one. A reader that falls more than 4096 events behind loses the oldest.
    public var documentEvents: AsyncStream<ReplicatedDocument> {
        let (stream, continuation) = AsyncStream.makeStream(
            of: ReplicatedDocument.self, bufferingPolicy: .bufferingNewest(Self.documentEventBufferCount))
        let observation = (try? peer.get()).flatMap { peer in
            agent.observeDocumentEvents(peer: peer.nodeID) { database, events in
                for event in events {
                    if let document = ReplicatedDocument(event, database: database.text) { continuation.yield(document) }
                }
            }
        }
        let key = state.withLock { state in
            let key = state.nextStream
            state.nextStream += 1
            state.documentStreams[key] = (continuation, observation)
            return key
        }
        continuation.onTermination = { [weak self] _ in
            observation?.cancel()
            _ = self?.state.withLock { $0.documentStreams.removeValue(forKey: key) }
        }
        return stream
    }

    /// Why the replicator is not replicating, or last failed to, as Couchbase Lite's
    /// `status.error` says it: the peer cannot be reached, does not allow this node, does not
    /// share the database with it, or broke the protocol. Nil while replication works (cleared
    /// when a connection to the peer starts) and before `start()`.
    public var lastError: ReplicatorError? {
        state.withLock { state in
            if case .failed(let error) = state.current { return error }
            return state.lastError.map { ReplicatorError(code: "replication", message: $0) }
        }
    }

    /// Starts replicating, if not running already: the peer is added to the node's config and
    /// replication begins (continuous: it goes on, idle when caught up; one-shot: one pass, then
    /// `.completed`). Returns at once; a configuration that cannot be applied shows as
    /// `.failed` in `status`.
    public func start() {
        begin { [weak self] result in
            guard let self, !self.configuration.continuous, case .success(let generation) = result else { return }
            self.agent.sync(peer: self.configuration.peer) { [weak self] result in
                if case .failure(let failure) = result {
                    self?.publish(.failed(ReplicatorError(code: failure.code, message: failure.message)), generation: generation)
                }
            }
        }
    }

    /// Replicates once in the configured direction and returns when every direction has caught
    /// up (pushed: the peer holds this node's changes; pulled: this node holds the peer's),
    /// starting the replicator first if it is not running. A continuous replicator stays
    /// connected afterwards. A lost connection is retried; the call fails if the replicator is
    /// stopped meanwhile, the peer breaks the protocol, or the configuration cannot be applied.
    /// A database the peer does not share with this node does not hold the call up: it is named
    /// in the outcome (`notSharedByPeer`), as are databases of which the peer takes only part
    /// of this node's writes (`peerTakesPart`).
    ///
    /// Each call is a pass of its own: a one-shot pass still running when it is called (one
    /// that may have read the feeds before the caller's last writes) is followed by another.
    /// Cancelling the task ends the wait at once with the error code `cancelled`; replication
    /// goes on as configured.
    @discardableResult
    public func sync() async throws(ReplicatorError) -> SyncOutcome {
        let started = await withCheckedContinuation { (done: CheckedContinuation<Result<Int, ReplicatorError>, Never>) in
            begin { done.resume(returning: $0) }
        }
        if case .failure(let error) = started { throw error }
        let wait = SyncWait()
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { (done: CheckedContinuation<Result<CanopyAgent.SyncOutcome, ReplicationFailure>, Never>) in
                wait.begin(done) { [agent, peer = configuration.peer] finish in agent.sync(peer: peer, finish) }
            }
        } onCancel: {
            wait.finish(.failure(ReplicationFailure(code: "cancelled", message: "the task waiting for the sync was cancelled")), cancelling: true)
        }
        switch result {
        case .success(let outcome):
            return SyncOutcome(
                completed: outcome.completed, rejected: outcome.rejected, refusedByPeer: outcome.refusedByPeer,
                received: outcome.received, sent: outcome.sent, notSharedByPeer: outcome.notSharedByPeer.keys.map(\.text).sorted(),
                peerTakesPart: Dictionary(uniqueKeysWithValues: outcome.peerTakesPart.map { ($0.key.text, $0.value.summary) }))
        case .failure(let failure):
            throw ReplicatorError(code: failure.code, message: failure.message)
        }
    }

    /// Stops replicating: the peer is removed from the node's config (neither dialled nor
    /// allowed any more; the session closes cleanly), every status stream gets `.stopped` and
    /// ends, and every document event stream ends. A `sync()` waiting fails. `start()` may be
    /// called again.
    public func stop() {
        let (streams, documentStreams, observation, wasRunning) = state.withLock { state in
            defer {
                state.running = false
                state.generation += 1
                state.current = .stopped
                state.streams = [:]
                state.documentStreams = [:]
                state.observation = nil
            }
            return (Array(state.streams.values), Array(state.documentStreams.values), state.observation, state.running)
        }
        observation?.cancel()
        // Outside the lock: ending a stream runs its termination handler, which takes the lock.
        for stream in streams {
            stream.yield(.stopped)
            stream.finish()
        }
        for (stream, observation) in documentStreams {
            observation?.cancel()
            stream.finish()
        }
        if wasRunning, case .success(let peer) = peer {
            // Dropped before the removal, which the engine takes after: the replicators keep the
            // overrides until they stop, and a start that follows sets its own.
            agent.setReplicatorOverrides(nil, peer: peer.nodeID) {}
            agent.removePeer(peer.nodeID) { _ in }
        }
    }

    /// Makes the replicator run, if it does not: observes the peer's status, then adds the peer
    /// to the node's config. `completion` gets the run's generation once the config is applied
    /// (at once when already running), or why it could not be.
    private func begin(_ completion: @escaping @Sendable (Result<Int, ReplicatorError>) -> Void) {
        let peer: PeerConfig
        switch self.peer {
        case .success(let config): peer = config
        case .failure(let error):
            state.withLock { state in state.current = .failed(error) }
            publishToStreams(.failed(error))
            return completion(.failure(error))
        }
        let generation: Int? = state.withLock { state in
            guard !state.running else { return nil }
            state.running = true
            state.generation += 1
            return state.generation
        }
        guard let generation else { return completion(.success(state.withLock { $0.generation })) }
        let observation = agent.observeReplicationStatus(peer: peer.nodeID) { [weak self] status in
            guard let self else { return }
            self.state.withLock { state in if state.generation == generation { state.lastError = status.lastError } }
            self.publish(Self.status(status, continuous: self.configuration.continuous), generation: generation)
        }
        state.withLock { state in
            if state.generation == generation { state.observation = observation } else { observation?.cancel() }
        }
        // The engine takes the overrides before the config change that adds the peer: both go
        // to its queue, in this order.
        agent.setReplicatorOverrides(
            ReplicatorOverrides(documentIDs: configuration.documentIDs, conflictPolicy: configuration.conflictResolution),
            peer: peer.nodeID) {}
        agent.setPeer(peer) { [weak self] result in
            switch result {
            case .success: completion(.success(generation))
            case .failure(let failure):
                let error = ReplicatorError(code: "config_failed", message: failure.message)
                self?.publish(.failed(error), generation: generation)
                completion(.failure(error))
            }
        }
    }

    /// Records `status` and sends it to every stream, unless it is the current one or comes
    /// from an earlier run.
    private func publish(_ status: Status, generation: Int) {
        state.withLock { state in
            guard state.running, state.generation == generation, state.current != status else { return }
            state.current = status
            for stream in state.streams.values { stream.yield(status) }
        }
    }

    /// Sends `status` to every stream without a run to check against (a configuration that
    /// never ran).
    private func publishToStreams(_ status: Status) {
        state.withLock { state in
            for stream in state.streams.values { stream.yield(status) }
        }
    }

    /// The engine's status as a replicator's: a one-shot replicator that stopped has finished
    /// its pass.
    private static func status(_ status: PeerStatus, continuous: Bool) -> Status {
        switch status.state {
        case .stopped: continuous ? .stopped : .completed
        case .offline, .unshared: .offline
        case .connecting: .connecting
        case .idle: .idle
        case .busy:
            .busy(ReplicationProgress(
                completed: status.pull.completed + status.push.completed, total: status.pull.total + status.push.total))
        case .error: .failed(ReplicatorError(code: "protocol", message: status.lastError ?? "the peer broke the replication protocol"))
        }
    }

    /// The peer's config entry: the id in canonical form, the address parsed, the mode.
    private static func peerConfig(_ configuration: ReplicatorConfiguration) -> Result<PeerConfig, ReplicatorError> {
        guard let nodeID = AgentIdentity.normalizeNodeID(configuration.peer) else {
            return .failure(ReplicatorError(
                code: "invalid_configuration", message: "\"\(configuration.peer.prefix(80))\" is not a node id"))
        }
        var address: HostPort?
        if let text = configuration.address {
            guard let parsed = HostPort(parsing: text), parsed.port != 0 else {
                return .failure(ReplicatorError(
                    code: "invalid_configuration", message: "\"\(text.prefix(80))\" is not HOST:PORT"))
            }
            address = parsed
        }
        if let ids = configuration.documentIDs {
            guard (1...WireLimits.filterDocIDsMax).contains(ids.count) else {
                return .failure(ReplicatorError(
                    code: "invalid_configuration", message: "documentIDs has \(ids.count) ids; 1 to \(WireLimits.filterDocIDsMax) are allowed"))
            }
            if let bad = ids.first(where: { !(1...WireLimits.docIDBytesMax).contains($0.utf8.count) }) {
                return .failure(ReplicatorError(
                    code: "invalid_configuration",
                    message: "documentIDs holds \"\(bad.prefix(80))\" of \(bad.utf8.count) bytes; an id has 1 to \(WireLimits.docIDBytesMax)"))
            }
        }
        return .success(PeerConfig(
            nodeID: nodeID, address: address, direction: configuration.direction,
            mode: configuration.continuous ? .continuous : .once))
    }
}

/// One `sync()` wait: resumed exactly once, by the agent's answer or by the task's cancellation
/// (which also ends the agent's wait), whichever comes first.
private final class SyncWait: Sendable {
    typealias Outcome = Result<CanopyAgent.SyncOutcome, ReplicationFailure>
    private let state = Mutex<(continuation: CheckedContinuation<Outcome, Never>?, cancellation: SyncCancellation?, ended: Outcome?)>(
        (nil, nil, nil))

    /// Starts the wait with `start`, which gets the completion to call; a cancellation that came
    /// first ends it at once.
    func begin(
        _ continuation: CheckedContinuation<Outcome, Never>,
        _ start: (@escaping @Sendable (Outcome) -> Void) -> SyncCancellation
    ) {
        let early: Outcome? = state.withLock { state in
            if let ended = state.ended { return ended }
            state.continuation = continuation
            return nil
        }
        if let early { return continuation.resume(returning: early) }
        let cancellation = start { [self] outcome in finish(outcome, cancelling: false) }
        let cancelNow = state.withLock { state in
            state.cancellation = cancellation
            return state.ended != nil
        }
        if cancelNow { cancellation.cancel() }
    }

    /// Resumes the wait with `outcome` unless it was resumed; `cancelling` also ends the agent's wait.
    func finish(_ outcome: Outcome, cancelling: Bool) {
        let (continuation, cancellation) = state.withLock { state in
            guard state.ended == nil else { return (nil as CheckedContinuation<Outcome, Never>?, nil as SyncCancellation?) }
            state.ended = outcome
            defer { state.continuation = nil }
            return (state.continuation, state.cancellation)
        }
        if cancelling { cancellation?.cancel() }
        continuation?.resume(returning: outcome)
    }
}

extension Replicator.Status: CustomStringConvertible {
    /// The status for people: `idle`, `busy 3/10` (entries completed of those known), `failed:
    /// <code>: <message>`.
    public var description: String {
        switch self {
        case .stopped: "stopped"
        case .offline: "offline"
        case .connecting: "connecting"
        case .idle: "idle"
        case .busy(let progress): "busy \(progress.completed)/\(progress.total)"
        case .completed: "completed"
        case .failed(let error): "failed: \(error)"
        }
    }
}
