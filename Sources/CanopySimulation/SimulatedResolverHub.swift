import CanopyAdmin
import CanopyCore
import CanopyReplication
import CanopyStore

/// What the simulated resolvers did, over every node (the report's `resolver [...]`).
final class ResolverCounters: @unchecked Sendable {
    /// Offers the nodes sent.
    var offered = 0
    /// Answers the nodes wrote.
    var answered = 0
    /// Answers the nodes refused (a pick that is not a leaf, a void ticket, no longer conflicted).
    var refused = 0
    /// Offers that got no answer in time.
    var timedOut = 0
    /// Connections that ended: the client closed them, or its node died.
    var disconnects = 0
    /// Answers the clients sent wrong on purpose (a pick that is not an open leaf).
    var wrong = 0
    /// Offers the clients let time out on purpose.
    var ignored = 0
    /// Scans the nodes ran (start, restart, registration).
    var scans = 0

    var counts: [String: Int] {
        ["offered": offered, "answered": answered, "refused": refused, "timedOut": timedOut,
         "disconnects": disconnects, "wrong": wrong, "ignored": ignored, "scans": scans]
    }
}

/// The agent's `ResolverHub` on simulated time: the node's side of its resolver client, carrying
/// out what `ResolverOffers` decides with the node's store and `NodeScheduler`. Store work (reads
/// of conflicts to offer, batches of answers, scans) runs as a step of its own, as the agent runs
/// it on its store queue; timeouts are the node's timers; offers and replies reach the client
/// through `SimulatedResolverClient`, a socket's latency later.
///
/// One hub per process lifetime: a crash marks it dead (`alive`), and whatever it scheduled is
/// dropped with the node's other work; the restarted node gets a new hub, which scans at once
/// (the agent scans at start).
final class SimulatedResolverHub: @unchecked Sendable {
    typealias Offers = ResolverOffers<Int>

    /// Seconds an offer waits for its answer (the agent's default is 10 s; shorter here so that
    /// timeouts happen within a fault phase).
    static let timeoutSeconds = 5
    /// As `AgentLimits.resolverRetryMaximumSeconds`.
    static let retryMaximumSeconds = 300
    /// Small limits, so that the in-flight window and read batches fill up.
    static let offersInFlightMax = 3
    static let readBatchMax = 2

    private let node: Int
    private let store: DocumentStore
    private let scheduler: NodeScheduler
    private let trace: SimulationTrace
    private let counters: ResolverCounters
    /// Weak: the client holds the node, whose hub this is, and the simulation owns the client
    /// (a strong reference here kept every node, its stores and their open files alive after the
    /// simulation ended).
    private weak var client: SimulatedResolverClient?
    private var offers: Offers
    private var timeouts: [Int64: any Cancellable] = [:]
    /// The connection each answer came on, until it is replied to.
    private var replyTo: [Int64: Int] = [:]
    /// Store work scheduled and not yet run.
    private var pendingWork = 0
    /// False once the node died: a dead process does nothing more.
    var alive = true

    init(node: Int, store: DocumentStore, rules: ResolutionRules, scheduler: NodeScheduler, trace: SimulationTrace,
         counters: ResolverCounters, client: SimulatedResolverClient) {
        self.node = node
        self.store = store
        self.scheduler = scheduler
        self.trace = trace
        self.counters = counters
        self.client = client
        offers = Offers(rules: [.default: rules], timeoutSeconds: Self.timeoutSeconds, retryMaximumSeconds: Self.retryMaximumSeconds,
                        offersInFlightMax: Self.offersInFlightMax,
                        readBatchMax: Self.readBatchMax, resolversMax: 64)
    }

    /// True when nothing is under way: no store work, no offer outstanding, no answer to write.
    var isIdle: Bool { pendingWork == 0 && offers.isIdle }

    /// Conflicts the machine keeps for a resolver.
    var waitingDocuments: Set<String> { offers.waitingDocuments(in: .default) }

    /// The node started: the scan the agent runs at start.
    func start() {
        handle { $0.scanRequested() }
    }

    /// Document events from replication, with the peer they came through.
    func observe(_ events: [DocumentEvent], peer: String?) {
        handle { $0.observe(events, peer: peer) }
    }

    // MARK: From the client

    /// `resolver.register {name}` on `connection`.
    func register(connection: Int) {
        guard alive else { return }
        do {
            let registered = try offers.register(name: SimulationRules.resolverName, prefix: nil, connection: connection)
            trace.record("n\(node) resolver registered c\(connection)")
            client?.registered(connection: connection, refusal: nil)
            handle { _ in registered.actions }
        } catch {
            trace.record("n\(node) resolver registration refused c\(connection): \(error.message)")
            client?.registered(connection: connection, refusal: error)
        }
    }

    /// The client's connection closed.
    func disconnected(connection: Int) {
        trace.record("n\(node) resolver disconnected c\(connection)")
        handle { $0.disconnected(connection) }
    }

    /// `resolver.answer {ticket, decision}` on `connection`, checked as the agent checks it.
    func answer(connection: Int, ticket: Int64, decision: ResolutionDecision) {
        guard alive else { return }
        guard let name = offers.resolver(on: connection) else {
            return refuse(connection, ticket, Offers.Refusal(code: "invalid_request", message: "this connection is not a registered resolver"))
        }
        guard offers.document(offeredAs: ticket, to: name) != nil else {
            return refuse(connection, ticket, Offers.Refusal(code: "not_found", message: "ticket \(ticket) is unknown or expired"))
        }
        replyTo[ticket] = connection
        handle { $0.answerReceived(ticket: ticket, decision: decision) }
    }

    private func refuse(_ connection: Int, _ ticket: Int64, _ refusal: Offers.Refusal) {
        trace.record("n\(node) resolver answer t\(ticket) c\(connection) refused: \(refusal.code)")
        counters.refused += 1
    }

    // MARK: The machine's actions

    private func handle(_ event: (inout Offers) -> [Offers.Action]) {
        guard alive else { return }
        for action in event(&offers) { execute(action) }
    }

    private func execute(_ action: Offers.Action) {
        switch action {
        case .readConflicts(let name, let documents):
            storeWork {
                let conflicts = (try? self.store.conflicts(ids: documents.map(\.document))) ?? []
                // A document queued twice is asked for twice; its conflict is the same.
                let byKey = Dictionary(conflicts.map { (Offers.Key(.default, $0.documentID), $0) }, uniquingKeysWith: { first, _ in first })
                self.handle { $0.conflictsRead(byKey, asked: documents, resolver: name) }
            }
        case .send(let connection, let offer):
            counters.offered += 1
            trace.record("n\(node) offer \(offer.documentID) t\(offer.ticket) c\(connection)")
            // The line the agent writes, as the client reads it.
            client?.offered(connection: connection, offer.line)
        case .scheduleTimeout(let ticket, let seconds):
            timeouts[ticket] = scheduler.schedule(after: Double(seconds)) { [weak self] in
                guard let self else { return }
                self.trace.record("n\(self.node) offer t\(ticket) timed out")
                self.counters.timedOut += 1
                self.handle { $0.timeoutFired(ticket: ticket) }
            }
        case .cancelTimeout(let ticket):
            timeouts.removeValue(forKey: ticket)?.cancel()
        case .scheduleRetry(let ticket, let seconds):
            _ = scheduler.schedule(after: Double(seconds)) { [weak self] in
                guard let self else { return }
                self.trace.record("n\(self.node) offer t\(ticket) retry due")
                self.handle { $0.retryDue(ticket: ticket) }
            }
        case .apply(let batch):
            storeWork { self.apply(batch) }
        case .emit(let events):
            for event in events {
                switch event {
                case .document(let event, _): trace.record("n\(node) \(event.kind) \(event.documentID)")
                case .disconnected(let name): trace.record("n\(node) resolver \(name) disconnected")
                }
            }
        case .reply(let ticket, let document, let result):
            let connection = replyTo.removeValue(forKey: ticket).map { "c\($0)" } ?? "-"
            switch result {
            case .success(let revision):
                counters.answered += 1
                trace.record("n\(node) answer t\(ticket) \(connection) wrote \(document) \(revision)", documents: [document.document])
            case .failure(let refusal):
                counters.refused += 1
                trace.record("n\(node) answer t\(ticket) \(connection) refused for \(document): \(refusal.code)", documents: [document.document])
            }
        case .policyChanged:
            store.applyConfiguredPolicy(.rules(offers.policy(for: .default)))
        case .scan:
            counters.scans += 1
            storeWork { self.scan() }
        case .drainFinished:
            break
        }
    }

    /// Runs `work` as a step of its own on the node (the agent's hop to its store queue and back).
    private func storeWork(_ work: @escaping @Sendable () -> Void) {
        pendingWork += 1
        scheduler.execute { [weak self] in
            guard let self, self.alive else { return }
            self.pendingWork -= 1
            work()
        }
    }

    private func apply(_ batch: [Offers.PendingAnswer]) {
        let results: [Result<RevisionID, Offers.Refusal>]
        do {
            let written = try store.applyResolutions(batch.map { (id: $0.document.document, decision: $0.decision) })
            results = written.map { $0.mapError(Self.refusal) }
        } catch {
            results = batch.map { _ in .failure(Self.refusal(error)) }
        }
        handle { $0.answersApplied(results) }
    }

    private func scan() {
        do {
            let results = try store.retryConflictResolution()
            let events = results.flatMap(DocumentEvent.scanEvents)
            trace.record("n\(node) scan found \(results.count) conflicts")
            handle { $0.observe(events, peer: nil) }
        } catch {
            trace.record("n\(node) scan failed: \(error)")
        }
    }

    /// An answer the store could not apply, with the code the agent would reply with.
    static func refusal(_ error: StoreError) -> Offers.Refusal {
        if case .handlerFailed(_, let underlying) = error, let plan = underlying as? ConflictResolution.PlanError {
            switch plan {
            case .notConflicted: return Offers.Refusal(code: "not_conflicted", message: "no longer conflicted")
            case .notAConflictingLeaf(let revision): return Offers.Refusal(code: "invalid_argument", message: "\(revision) is not an open leaf")
            case .bodyUnavailable(let revision): return Offers.Refusal(code: "failed", message: "the body of \(revision) is no longer stored")
            }
        }
        return Offers.Refusal(code: "failed", message: "\(error)")
    }
}
