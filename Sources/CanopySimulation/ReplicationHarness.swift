import CanopyCore
import CanopyReplication
import CanopyStore
import Foundation
import Logging

/// Nodes with real SQLite stores connected by in-memory links on one `SimulatedScheduler`: the
/// real replication engine, with only the transport, clock, scheduler and randomness simulated.
/// Tests and the simulator build on it.
public final class ReplicationHarness: @unchecked Sendable {
    /// One node: a store file and its live sessions.
    public final class Node: @unchecked Sendable {
        /// The node's name (for messages).
        public let name: String
        /// Path of the node's database file.
        public let path: String
        /// The store; replaced when the node restarts.
        public private(set) var store: DocumentStore
        let storeConfiguration: DocumentStore.Configuration
        /// Document events the node's sessions reported, in order.
        public fileprivate(set) var events: [DocumentEvent] = []
        /// Times a pull reached the peer's end (per peer name).
        public fileprivate(set) var caughtUp: [String: Int] = [:]
        fileprivate var sessions: [ReplicationSession] = []

        init(name: String, path: String, configuration: DocumentStore.Configuration) throws {
            self.name = name
            self.path = path
            self.storeConfiguration = configuration
            store = try DocumentStore(path: path, configuration: configuration)
        }

        /// Closes the store and opens the file again, as a restarted process would; sessions must
        /// have been closed first.
        public func reopen(configuration: DocumentStore.Configuration? = nil) throws {
            store = try DocumentStore(path: path, configuration: configuration ?? storeConfiguration)
        }
    }

    /// A connection between two nodes.
    public struct Connection {
        /// The link (cut it to simulate a reset).
        public let link: InMemoryLink
        /// The sessions at each end.
        package let sessions: (ReplicationSession, ReplicationSession)
    }

    public let scheduler = SimulatedScheduler()
    public let random: SeededRandom
    public let directory: URL
    public private(set) var nodes: [Node] = []
    private let logger: Logger

    /// A harness whose files live in a fresh temporary directory.
    public init(seed: UInt64 = 1, logger: Logger = Logger(label: "canopy.harness")) throws {
        random = SeededRandom(seed: seed)
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("canopy-harness-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        self.logger = logger
    }

    deinit {
        try? FileManager.default.removeItem(at: directory)
    }

    /// Adds a node with its own database file; its attachment content lives beside the file, or
    /// in `attachmentsDirectory` (nodes given the same one share it, as an agent's databases do).
    @discardableResult
    public func addNode(
        _ name: String, policy: ConflictPolicy = .automatic, revsLimit: Int? = nil, attachmentsDirectory: String? = nil
    ) throws -> Node {
        let path = directory.appendingPathComponent("\(name).sqlite").path
        let node = try Node(name: name, path: path, configuration: .init(
            revsLimit: revsLimit, conflictPolicy: policy, logger: logger, attachmentsDirectory: attachmentsDirectory))
        nodes.append(node)
        return node
    }

    /// Connects two nodes with a fresh link and starts a session at each end.
    @discardableResult
    public func connect(
        _ a: Node, _ b: Node, configuration: ReplicationConfiguration = ReplicationConfiguration(),
        configurationB: ReplicationConfiguration? = nil, latencySeconds: Double = 0.0005
    ) -> Connection {
        let link = InMemoryLink(scheduler: scheduler, latencySeconds: latencySeconds)
        let sessionA = session(for: a, peer: b, transport: link.ends.0, configuration: configuration)
        let sessionB = session(for: b, peer: a, transport: link.ends.1, configuration: configurationB ?? configuration)
        sessionA.start()
        sessionB.start()
        return Connection(link: link, sessions: (sessionA, sessionB))
    }

    private func session(for node: Node, peer: Node, transport: InMemoryLink.Endpoint, configuration: ReplicationConfiguration) -> ReplicationSession {
        let peerName = peer.name
        let session = ReplicationSession(
            store: node.store, transport: transport, scheduler: scheduler, random: random,
            configuration: configuration, logger: logger
        ) { [weak node] event in
            guard let node else { return }
            switch event {
            case .documents(let documentEvents): node.events.append(contentsOf: documentEvents)
            case .pullCaughtUp: node.caughtUp[peerName, default: 0] += 1
            default: break
            }
        }
        node.sessions.append(session)
        return session
    }

    /// Runs until no session has work in flight and nothing is scheduled within `quietSeconds`
    /// (heartbeat timers lie further out), or until `maxSeconds` of virtual time pass. Returns
    /// true when quiescent.
    @discardableResult
    public func runUntilQuiescent(maxSeconds: Double = 600, quietSeconds: Double = 1) -> Bool {
        let deadline = scheduler.now + maxSeconds
        while scheduler.now <= deadline {
            if allSessionsIdle, scheduler.nextTime.map({ $0 > scheduler.now + quietSeconds }) ?? true { return true }
            if !scheduler.step() { return allSessionsIdle }
        }
        return false
    }

    private var allSessionsIdle: Bool {
        nodes.allSatisfy { node in node.sessions.allSatisfy { $0.isClosed || !$0.isBusy } }
    }

    /// Closes every session of `node` abruptly (as a crash would: no goodbye) and forgets them.
    public func dropSessions(of node: Node) {
        node.sessions.removeAll()
    }

    /// The differences between nodes: for every document any node holds, the nodes must agree on
    /// the current revision and the set of open leaves. Empty when converged.
    public func divergences() throws -> [String] {
        var views: [[String: (RevisionID, [RevisionID])]] = []
        for node in nodes {
            var view: [String: (RevisionID, [RevisionID])] = [:]
            var since: Int64 = 0
            while true {
                let page = try node.store.changesPage(since: since, limit: 1000)
                for change in page.changes {
                    let open = change.leaves.filter { !$0.kind.isClosed }.map(\.revision)
                    view[change.documentID] = (change.current, open)
                }
                guard let last = page.lastSequence else { break }
                since = last
            }
            views.append(view)
        }
        var problems: [String] = []
        let allIDs = Set(views.flatMap(\.keys)).sorted()
        for id in allIDs {
            let states = views.map { $0[id] }
            let first = states[0]
            for (index, state) in states.enumerated().dropFirst() where state?.0 != first?.0 || state?.1 != first?.1 {
                problems.append("\(id): \(nodes[0].name) has \(Self.describe(first)), \(nodes[index].name) has \(Self.describe(state))")
            }
            if problems.count > 20 { break }
        }
        return problems
    }

    private static func describe(_ state: (RevisionID, [RevisionID])?) -> String {
        guard let state else { return "nothing" }
        return "current \(state.0) open \(state.1.map(\.description))"
    }
}
