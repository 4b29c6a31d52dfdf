import CanopyCore
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
/// through the simulated network), and the node-level faults: crash + restart, pause + resume.
///
/// The lower-numbered node of each edge dials; the other accepts. A crash discards the node's
/// scheduled work and connections (its peers see resets) and closes its store; a restart opens
/// the same file again, so exactly the committed transactions survive.
public final class SimulationNode: @unchecked Sendable {
    /// The node's index in the simulation (its name is `n<index>`).
    public let index: Int
    /// The name used in traces and reports.
    public var name: String { "n\(index)" }
    /// The database file, which survives crashes.
    public let path: String
    /// Neighbours, sorted.
    public let peers: [Int]
    let scheduler: NodeScheduler
    private let network: SimulatedNetwork
    private let random: SeededRandom
    private let storeConfiguration: DocumentStore.Configuration
    private let logger: Logger
    /// Called for every document event with the peer it came through.
    var onEvent: @Sendable (Int, DocumentEvent) -> Void = { _, _ in }
    /// The open store; nil while crashed.
    public private(set) var store: DocumentStore?
    /// Replicators by peer index; empty while crashed.
    private(set) var replicators: [Int: PeerReplicator] = [:]
    /// Looks up another node (for accepting connections).
    var lookup: @Sendable (Int) -> SimulationNode? = { _ in nil }

    init(index: Int, path: String, peers: [Int], network: SimulatedNetwork, random: SeededRandom,
         configuration: DocumentStore.Configuration, logger: Logger) throws {
        self.index = index
        self.path = path
        self.peers = peers
        self.network = network
        self.scheduler = network.schedulers[index]
        self.random = random
        self.storeConfiguration = configuration
        self.logger = logger
        store = try DocumentStore(path: path, configuration: configuration)
    }

    /// True when the node is up and not paused (it can take writes).
    public var isRunning: Bool { store != nil && !scheduler.isPaused }

    /// Creates and starts a continuous replicator for every neighbour.
    func startReplication(configuration: ReplicationConfiguration) {
        guard let store else { return }
        for peer in peers {
            let dialer: PeerDialer? = index < peer ? SimulatedDialer(network: network, from: index, to: peer, lookup: lookup) : nil
            let replicator = PeerReplicator(
                peerName: "n\(peer)", store: store, dialer: dialer, scheduler: scheduler, random: random,
                configuration: configuration, backoff: Backoff(initialSeconds: 0.5, maximumSeconds: 20, jitter: 0.5),
                logger: logger, onDocumentEvents: { [weak self] events in
                    for event in events { self?.onEvent(peer, event) }
                })
            replicators[peer] = replicator
        }
        for peer in peers { replicators[peer]?.start() }
    }

    /// Kills the node: pending work and connections vanish, the store is closed.
    func crash() {
        scheduler.crash()
        replicators = [:]
        store = nil
        network.takeDown(index)
    }

    /// Opens the store file again and restarts replication.
    func restart(configuration: ReplicationConfiguration, storeConfiguration override: DocumentStore.Configuration? = nil) throws {
        store = try DocumentStore(path: path, configuration: override ?? storeConfiguration)
        network.bringUp(index)
        startReplication(configuration: configuration)
    }

    /// True when every neighbour has an open session that is idle (caught up both ways).
    var isQuiescent: Bool {
        guard store != nil, !scheduler.isPaused else { return false }
        return peers.allSatisfy { peer in
            guard let session = replicators[peer]?.currentSession else { return false }
            return !session.isClosed && !session.isBusy
        }
    }
}

/// Dials a neighbour through the simulated network and hands the listener's end to the
/// neighbour's replicator for us.
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
            if let replicator = lookup(to)?.replicators[from] {
                replicator.accept(transport)
            } else {
                transport.close(.localClosed)
            }
        }, completion: completion)
    }
}
