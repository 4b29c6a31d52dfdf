import CanopyAdmin
import CanopyCore
import CanopyReplication

/// An application's resolver client beside one node (`resolver.register {name: "sim"}`), as a
/// seeded simulated process: it outlives its node's crashes, and reaches the node's
/// `SimulatedResolverHub` over a simulated socket (`socketSeconds` each way; what it sends goes
/// through the node's scheduler, so a paused node holds it and a dead one drops it).
///
/// During the fault phase it misbehaves, as the seed says: it answers after a delay (a few
/// seconds one time in eight, past the node's timeout sometimes), lets one offer in six go
/// unanswered, answers one in six with a pick that is not an open leaf, and closes its connection at random
/// moments, reconnecting 0.5–5 s later. Clients differ: some merge the leaves
/// (`BuiltInResolver.mergeJSON`), some keep the current one, so nodes decide differently.
/// After the heal it answers every offer correctly and promptly, and stays connected.
///
/// State: `connection` is the current connection's id (nil while closed); `registered` once the
/// node accepted it. Offers and replies for an older connection are dropped.
final class SimulatedResolverClient: @unchecked Sendable {
    /// How the client settles a conflict.
    enum Style: String {
        case merge, keep
    }

    static let socketSeconds = 0.002

    let node: SimulationNode
    let style: Style
    private let base: SimulatedScheduler
    private let trace: SimulationTrace
    private let counters: ResolverCounters
    private var random: SplitMix64
    private var nextConnection = 1
    private(set) var connection: Int?
    private(set) var registered = false
    private var reconnectScheduled = false
    /// True after the heal: no more misbehaviour.
    private(set) var healed = false
    /// True once `stop` closed it for good (tests plant a resolver that never comes back).
    private(set) var stopped = false

    init(node: SimulationNode, seed: UInt64, base: SimulatedScheduler, trace: SimulationTrace, counters: ResolverCounters) {
        self.node = node
        random = SplitMix64(seed: seed ^ 0x2E50_0009 ^ (UInt64(node.index) &* 0x9E37_79B9_7F4A_7C15))
        style = random.chance(1, in: 2) ? .merge : .keep
        self.base = base
        self.trace = trace
        self.counters = counters
    }

    /// Connected and registered. (An offer it is deciding on, or an answer on its way, keeps a
    /// ticket outstanding on the node, which the node's hub counts as busy.)
    var isSettled: Bool { registered }

    // MARK: Connecting

    /// Connects and registers; while the node is down, tries again every second.
    func connect() {
        guard connection == nil, !stopped else { return }
        guard node.store != nil else { return reconnect(after: 1) }
        let id = nextConnection
        nextConnection += 1
        connection = id
        registered = false
        trace.record("n\(node.index) client connects c\(id)")
        toNode { $0.register(connection: id) }
    }

    /// The node's answer to the registration.
    func registered(connection id: Int, refusal: ResolverOffers<Int>.Refusal?) {
        fromNode { [self] in
            guard connection == id else { return }
            if refusal == nil {
                registered = true
            } else {
                connection = nil
                reconnect(after: 0.5)
            }
        }
    }

    /// Closes the connection and reconnects after `seconds`.
    func disconnect(reconnectAfter seconds: Double) {
        guard let id = connection else { return }
        connection = nil
        registered = false
        counters.disconnects += 1
        trace.record("n\(node.index) client closes c\(id)")
        toNode { $0.disconnected(connection: id) }
        reconnect(after: seconds)
    }

    /// The node died: the connection is gone with it.
    func nodeDied() {
        guard connection != nil else { return }
        connection = nil
        registered = false
        counters.disconnects += 1
        reconnect(after: 1)
    }

    private func reconnect(after seconds: Double) {
        guard !reconnectScheduled else { return }
        reconnectScheduled = true
        base.schedule(after: seconds) { [weak self] in
            guard let self else { return }
            self.reconnectScheduled = false
            self.connect()
        }
    }

    /// A seeded moment of the fault phase: the client drops its connection.
    func misbehave() {
        guard !healed else { return }
        disconnect(reconnectAfter: 0.5 + 4.5 * unit())
    }

    /// The heal: from now on the client behaves, and it registers afresh (so that the node offers
    /// again what failed).
    func heal() {
        healed = true
        if connection != nil { disconnect(reconnectAfter: 0.1) } else { reconnect(after: 0.1) }
    }

    /// Closes the connection for good.
    func stop() {
        stopped = true
        disconnect(reconnectAfter: 0)
    }

    // MARK: Offers and answers

    /// An offer line from the node (`Protocol/admin-v1.md` §5).
    func offered(connection id: Int, _ line: JSONValue) {
        fromNode { [self] in
            guard connection == id, let members = line.objectValue, case .offer(let offer)? = try? AdminLine.read(members) else { return }
            let ticket = offer.ticket
            if !healed && random.chance(1, in: 6) {
                counters.ignored += 1
                return
            }
            let decision = decide(offer)
            let delay = healed ? exponential(mean: 0.2, &random) : (random.chance(1, in: 8) ? 3 + 12 * unit() : exponential(mean: 0.3, &random))
            base.schedule(after: delay) { [weak self] in
                guard let self else { return }
                guard self.connection == id else { return }
                self.toNode { $0.answer(connection: id, ticket: ticket, decision: decision) }
            }
        }
    }

    /// The client's decision: its style, or (before the heal, now and then) a pick that is not an
    /// open leaf.
    private func decide(_ offer: ResolverOffer) -> ResolutionDecision {
        if !healed && random.chance(1, in: 6) {
            counters.wrong += 1
            return .keep(RevisionID(generation: 1, digestHigh: random.next(), digestLow: random.next()))
        }
        if style == .merge, let merged = try? BuiltInResolver.mergeJSON.resolve(offer.conflict) { return merged }
        return .keep(offer.conflict.leaves[0].revision)
    }

    // MARK: The socket

    /// Sends to the node's current hub, a socket's latency later, through the node's scheduler.
    private func toNode(_ deliver: @escaping @Sendable (SimulatedResolverHub) -> Void) {
        let node = self.node
        node.scheduler.schedule(after: Self.socketSeconds) {
            if let hub = node.resolverHub { deliver(hub) }
        }
    }

    /// Receives from the node, a socket's latency later.
    private func fromNode(_ deliver: @escaping @Sendable () -> Void) {
        base.schedule(after: Self.socketSeconds, deliver)
    }

    private func unit() -> Double { Double(random.next() >> 11) * 0x1p-53 }
}
