import CanopyCore
import CanopyReplication
import CanopyStore

/// The `rules` policy's resolvers: a `SimulatedResolverClient` beside every node, talking to the
/// node's `SimulatedResolverHub` (the agent's resolver logic, `ResolverOffers`, on simulated
/// time).
///
///     start      every node's hub scans; every client connects and registers
///     fault      clients misbehave at seeded moments (`misbehave`), besides the answers they
///                delay, drop or get wrong; a crashed node loses its hub and its connection, and
///                the restarted node's new hub scans
///     heal       every client reconnects for good and answers correctly
///     settle     quiet only once every client is registered and every hub is idle
///     check      no conflict a rule routes to a resolver is left (`unsettledConflicts`)
extension Simulation {
    /// Whether this run has resolver clients.
    var hasResolvers: Bool { configuration.policy == .rules }

    /// Starts `node`'s hub for its current process lifetime (at start and after a restart).
    func startResolverHub(_ node: Int) {
        guard hasResolvers, let store = nodes[node].store else { return }
        let hub = SimulatedResolverHub(
            node: node, store: store, rules: nodeRules[node], scheduler: nodes[node].scheduler, trace: trace,
            counters: resolverCounters, client: resolverClients[node])
        nodes[node].resolverHub = hub
        hub.start()
    }

    /// Connects every client (at start).
    func connectResolverClients() {
        for client in resolverClients { client.connect() }
    }

    /// Seeded moments of the fault phase at which a client drops its connection: one every 10 s
    /// per client on average.
    func scheduleResolverMisbehaviour(until end: Double) {
        guard hasResolvers else { return }
        var random = SplitMix64(seed: configuration.seed ^ 0x2E50_000A)
        for client in resolverClients {
            var time = 0.0
            while true {
                time += exponential(mean: 10, &random)
                guard time < end else { break }
                scheduler.schedule(after: time - scheduler.now) { client.misbehave() }
            }
        }
    }

    /// True when every client is registered (or stopped for good) and every hub has nothing
    /// under way.
    var resolversQuiet: Bool {
        guard hasResolvers else { return true }
        return zip(nodes, resolverClients).allSatisfy { node, client in
            (client.isSettled || client.stopped) && (node.resolverHub?.isIdle ?? false)
        }
    }

    /// Conflicts `node` still holds that its rules do not leave to `manual`: those waiting for a
    /// resolver, or that a built-in strategy should have settled. With the strategy that covers
    /// each.
    func unsettledConflicts(on node: Int) throws -> [(document: String, strategy: ResolutionStrategy)] {
        try keptConflicts(on: node).filter { $0.strategy != .manual }
    }

    /// Conflicts `node`'s rules leave to `manual`: kept, open leaves and all, until someone
    /// resolves them (an open deletion among them does not win yet).
    func manualConflicts(on node: Int) throws -> Set<String> {
        Set(try keptConflicts(on: node).filter { $0.strategy == .manual }.map(\.document))
    }

    /// Every conflict `node` holds, with the strategy its rules give it.
    private func keptConflicts(on node: Int) throws -> [(document: String, strategy: ResolutionStrategy)] {
        guard let store = nodes[node].store else { return [] }
        let rules = nodeRules[node]
        return try store.conflicts(ids: try store.conflictedDocumentIDs()).map { conflict in
            (conflict.documentID, rules.strategy(for: conflict.documentID, bodies: conflict.leaves.map(\.body)).strategy)
        }
    }
}
