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

        /// Creates an outcome.
        public init(completed: UInt64, rejected: Int64 = 0, refusedByPeer: Int64 = 0) {
            self.completed = completed
            self.rejected = rejected
            self.refusedByPeer = refusedByPeer
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
    @discardableResult
    public func sync() async throws(ReplicatorError) -> SyncOutcome {
        let started = await withCheckedContinuation { (done: CheckedContinuation<Result<Int, ReplicatorError>, Never>) in
            begin { done.resume(returning: $0) }
        }
        if case .failure(let error) = started { throw error }
        let result = await withCheckedContinuation { (done: CheckedContinuation<Result<CanopyAgent.SyncOutcome, ReplicationFailure>, Never>) in
            agent.sync(peer: configuration.peer) { done.resume(returning: $0) }
        }
        switch result {
        case .success(let outcome):
            return SyncOutcome(completed: outcome.completed, rejected: outcome.rejected, refusedByPeer: outcome.refusedByPeer)
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
        case .offline: .offline
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
