import CanopyCore
import CanopyCrypto
import CanopyReplication
import CanopyStore
import Foundation
import Logging

/// A resolver that throws for about a third of the conflicts it sees until it is fixed, then
/// merges with `BuiltInResolver.mergeJSON`. Whether it throws is a pure function of the seed, the
/// document and the conflicting leaves, so every node and every replay decides alike.
public final class FlakyResolver: ConflictResolver, @unchecked Sendable {
    private let seed: UInt64
    /// Once true, the resolver never throws (the heal "fixes the application").
    public var fixed = false
    /// While true (and not fixed), the resolver throws for every conflict (tests plant with it).
    public var refusesAll = false

    /// The error it throws.
    public struct Refusal: Error, CustomStringConvertible {
        public let documentID: String
        public var description: String { "the simulated resolver refused \(documentID)" }
    }

    /// A resolver seeded with `seed`.
    public init(seed: UInt64) {
        self.seed = seed
    }

    public func resolve(_ conflict: Conflict) throws -> ResolutionDecision {
        if !fixed && (refusesAll || Self.refuses(seed: seed, conflict)) { throw Refusal(documentID: conflict.documentID) }
        return try BuiltInResolver.mergeJSON.resolve(conflict)
    }

    /// Whether the resolver refuses this conflict: a third of conflicts, by a hash of the seed,
    /// the document id and the sorted leaves.
    static func refuses(seed: UInt64, _ conflict: Conflict) -> Bool {
        var input = Array("flaky".utf8)
        withUnsafeBytes(of: seed.littleEndian) { input.append(contentsOf: $0) }
        input.append(contentsOf: conflict.documentID.utf8)
        for leaf in conflict.leaves.map(\.revision).sorted() { input.append(contentsOf: "\(leaf)".utf8) }
        return Blake2b.hash(input, outputBytes: 16)[0] % 3 == 0
    }
}

/// One simulated node: a store file, a `PeerReplicator` per neighbour (continuous, dialling
/// through the simulated network), and the node-level faults: crash + restart, pause + resume,
/// and the storage faults of `StorageFaults`.
///
/// What production runs, runs here: every node dials every neighbour (both ends of an edge dial,
/// and redial after a failure), and the simultaneous-connect rule of the agent
/// (`SimultaneousConnect`, applied as `EngineReplication` applies it) picks the connection both
/// keep; sessions check and write received revisions on a `SimulatedWorker` (unless the
/// configuration asks for the inline one).
///
/// A crash is a kill: the node's scheduled work and connections vanish (its peers see resets),
/// its files are left as they are on disk — without a clean close, so without the checkpoint a
/// close would run — and a restart opens them again, so exactly the committed transactions
/// survive, through SQLite's WAL recovery. The files a crash leaves are copied to the node's next
/// file name (`n<index>.<generation>.sqlite`): the dead process's store object may outlive the
/// crash in memory for a while, and must never touch the files the restarted node opens.
public final class SimulationNode: @unchecked Sendable {
    /// The node's index in the simulation (its name is `n<index>`).
    public let index: Int
    /// The name used in traces and reports.
    public var name: String { "n\(index)" }
    /// The database file the node opens; a new name after every crash (the crash's files copied).
    public private(set) var path: String
    /// Neighbours, sorted.
    public let peers: [Int]
    let scheduler: NodeScheduler
    private let network: SimulatedNetwork
    private let random: SeededRandom
    private let storeConfiguration: DocumentStore.Configuration
    private let logger: Logger
    /// Makes the worker of a new replicator (nil: the inline worker).
    private let makeWorker: (() -> any ReplicationWorker)?
    private let races: RaceCounters
    /// The node's storage faults (the store's fault injector).
    let storage: StorageFaults
    /// Crashes so far; the files of generation g > 0 are `<base>.<g>.sqlite`.
    private var generation = 0
    /// `path` without its `.sqlite` suffix, as given.
    private let basePath: String
    /// Called for every document event with the peer it came through.
    var onEvent: @Sendable (Int, DocumentEvent) -> Void = { _, _ in }
    /// The open store; nil while crashed.
    public private(set) var store: DocumentStore?
    /// Replicators by peer index; empty while crashed.
    private(set) var replicators: [Int: PeerReplicator] = [:]
    /// The connection each peer's session runs on, for the simultaneous-connect rule (as the
    /// agent's `EngineReplication.Peer.connection`).
    /// The connection each peer's session runs on (`SimultaneousConnect.Adoption`, as the agent keeps it).
    private var adoption = SimultaneousConnect.Adoption()
    /// The node side of its resolver client, for this process lifetime (`rules` runs only).
    var resolverHub: SimulatedResolverHub?
    /// Looks up another node (for accepting connections).
    var lookup: @Sendable (Int) -> SimulationNode? = { _ in nil }

    init(index: Int, path: String, peers: [Int], network: SimulatedNetwork, random: SeededRandom,
         configuration: DocumentStore.Configuration, storage: StorageFaults, races: RaceCounters,
         makeWorker: (() -> any ReplicationWorker)?, logger: Logger) throws {
        self.index = index
        self.path = path
        basePath = path.hasSuffix(".sqlite") ? String(path.dropLast(".sqlite".count)) : path
        self.peers = peers
        self.network = network
        self.scheduler = network.schedulers[index]
        self.random = random
        self.storage = storage
        self.races = races
        self.makeWorker = makeWorker
        self.storeConfiguration = configuration
        self.logger = logger
        storage.path = { [weak self] in self?.path ?? "" }
        store = try openStore(storeConfiguration)
    }

    /// Opens the node's current files, with the storage faults of this process lifetime.
    private func openStore(_ configuration: DocumentStore.Configuration) throws -> DocumentStore {
        var configuration = configuration
        let lifetime = generation
        configuration.faultInjector = StorageFaults.Lifetime(storage) { [weak self] in
            guard let self else { return false }
            return self.generation == lifetime && (self.store != nil || self.opening)
        }
        // The process lives while it opens its store: the open may write (the retry pass).
        opening = true
        defer { opening = false }
        return try DocumentStore(path: path, configuration: configuration)
    }

    /// True while `openStore` runs: the store is not assigned yet, but the process is alive.
    private var opening = false

    /// True when the node is up and not paused (it can take writes).
    public var isRunning: Bool { store != nil && !scheduler.isPaused }

    /// Creates and starts a continuous replicator for every neighbour; each dials at once.
    func startReplication(configuration: ReplicationConfiguration) {
        guard let store else { return }
        for peer in peers {
            let dialer = SimulatedDialer(network: network, from: index, to: peer, lookup: lookup)
            let replicator = PeerReplicator(
                peerName: "n\(peer)", store: store, dialer: dialer, scheduler: scheduler, random: random,
                configuration: configuration, backoff: Backoff(initialSeconds: 0.5, maximumSeconds: 20, jitter: 0.5),
                logger: logger, worker: makeWorker?() ?? InlineReplicationWorker(), onDocumentEvents: { [weak self] events in
                    for event in events { self?.onEvent(peer, event) }
                })
            replicators[peer] = replicator
        }
        for peer in peers { replicators[peer]?.start() }
    }

    // MARK: Simultaneous connect (as the agent's EngineReplication)

    /// An outbound connection to `peer` completed, before the replicator sees it: true to hand
    /// it to the replicator's dial completion (which takes it, or closes it when a session is
    /// already open); false when it beat the inbound connection the session runs on and the
    /// session moved to it (the peer, applying the same rule, keeps it too).
    func adoptOutbound(peer: Int, _ transport: SimulatedLink.End) -> Bool {
        guard let replicator = replicators[peer] else { return true }
        // A session already open on a connection: this one races it.
        let racing = replicator.status.connected && adoption.connection(of: Self.name(peer)) != nil
        if racing { races.simultaneousConnects += 1 }
        guard adoption.admit(transport.link.connection, from: Self.name(peer), sessionOpen: racing), racing else { return true }
        replicator.accept(transport)
        return false
    }

    /// The connection the session with `peer` last took.
    func connection(to peer: Int) -> SimultaneousConnect.Connection? { adoption.connection(of: Self.name(peer)) }

    /// An inbound connection from `peer`: kept, replacing the session's connection, unless the
    /// session's connection wins under the rule; then the new one is closed.
    func acceptInbound(from peer: Int, _ transport: SimulatedLink.End) {
        guard let replicator = replicators[peer] else { return transport.close(.localClosed) }
        let open = replicator.status.connected
        guard adoption.admit(transport.link.connection, from: Self.name(peer), sessionOpen: open) else {
            races.simultaneousConnects += 1
            return transport.close(.localClosed)
        }
        replicator.accept(transport)
    }

    /// A peer's name in the adoption table.
    private static func name(_ peer: Int) -> String { "n\(peer)" }

    // MARK: Crash and restart

    /// Kills the node: pending work and connections vanish, and its files stay as `image` has
    /// them (as they are on disk now when nil), under the name the restart opens.
    func crash(image: CrashImage? = nil) throws {
        let image = try image ?? CrashImage.capture(path: path)
        scheduler.crash()
        resolverHub?.alive = false
        resolverHub = nil
        replicators = [:]
        adoption = SimultaneousConnect.Adoption()
        store = nil
        storage.tearNextCommit = nil
        network.takeDown(index)
        generation += 1
        path = basePath + ".\(generation).sqlite"
        try image.write(to: path)
    }

    /// Opens the store file again (SQLite recovers its WAL) and restarts replication.
    func restart(configuration: ReplicationConfiguration, storeConfiguration override: DocumentStore.Configuration? = nil) throws {
        store = try openStore(override ?? storeConfiguration)
        scheduler.revive()
        network.bringUp(index)
        startReplication(configuration: configuration)
    }

    /// True when every neighbour has an open session that is idle (caught up both ways).
    var isQuiescent: Bool {
        // A revision set aside for its content is work still to do, not rest.
        guard let store, !scheduler.isPaused, (try? store.awaitingContentCount()) == 0 else { return false }
        return peers.allSatisfy { peer in
            guard let session = replicators[peer]?.currentSession else { return false }
            return !session.isClosed && !session.isBusy
        }
    }
}

/// Dials a neighbour through the simulated network, as the agent's `TCPPeerDialer` dials TCP:
/// the listener's end goes to the neighbour's simultaneous-connect check, and the dialler's end
/// through ours before the replicator sees it.
final class SimulatedDialer: PeerDialer, @unchecked Sendable {
    private let network: SimulatedNetwork
    private let from: Int
    private let to: Int
    private let lookup: @Sendable (Int) -> SimulationNode?

    init(network: SimulatedNetwork, from: Int, to: Int, lookup: @escaping @Sendable (Int) -> SimulationNode?) {
        self.network = network
        self.from = from
        self.to = to
        self.lookup = lookup
    }

    func dial(_ completion: @escaping @Sendable (Result<any MessageTransport, ReplicationError>) -> Void) {
        let (from, to, lookup) = (self.from, self.to, self.lookup)
        network.dial(from: from, to: to, accept: { transport in
            if let node = lookup(to) {
                node.acceptInbound(from: from, transport)
            } else {
                transport.close(.localClosed)
            }
        }, completion: { result in
            switch result {
            case .success(let transport):
                if lookup(from)?.adoptOutbound(peer: to, transport) ?? true {
                    completion(.success(transport))
                } else {
                    completion(.failure(.disconnected("simultaneous connect: the session moved to this connection")))
                }
            case .failure(let error):
                completion(.failure(error))
            }
        })
    }
}
