import CanopyAdmin
import CanopyCore
import CanopyReplication
import CanopyStore
import Dispatch

/// Application resolvers connected over the admin socket (`resolver.register`), and the conflicts
/// waiting for them (`Protocol/admin-v1.md` §5, *Resolvers*): the driver of `ResolverOffers`,
/// which makes every decision. This class carries its actions out with the agent's queues, the
/// store and the admin connections, and nothing else: the simulator drives the same machine.
///
/// Where the actions go: reads of conflicts to offer, answers written in batches (one
/// transaction per batch, `DocumentStore.applyResolutions`) and scans run on `storeQueue` and
/// report back on `queue`; offers and replies go to the admin clients; timeouts are work items
/// on `queue`; events go to the `EventHub`, whose document events come back through `observe`.
///
/// Invariants: all state is on the agent's `queue`; the store is touched only on `storeQueue`; a
/// registered resolver's client is held in `clients` until its connection closes, so its
/// `ObjectIdentifier` names no other connection meanwhile.
final class ResolverHub: @unchecked Sendable {
    private typealias Offers = ResolverOffers<ObjectIdentifier>

    private unowned let agent: Agent
    private var offers: Offers
    /// Registered resolvers' connections.
    private var clients: [ObjectIdentifier: AdminClient] = [:]
    /// Timeouts of the offers outstanding, by ticket.
    private var timeouts: [Int64: DispatchWorkItem] = [:]
    /// Replies owed to answers received, by ticket.
    private var replies: [Int64: TypedAdminRoute<Admin.AnswerResolver>.Reply] = [:]
    private var drained: [@Sendable () -> Void] = []

    init(agent: Agent) {
        self.agent = agent
        offers = Offers(
            rules: Self.rules(of: agent.config), timeoutSeconds: agent.config.limits.resolverTimeoutSeconds,
            retryMaximumSeconds: AgentLimits.resolverRetryMaximumSeconds, offersInFlightMax: AgentLimits.resolverOffersInFlightMax, resolversMax: AgentLimits.resolversMax)
    }

    /// Feeds one event to the machine (with the config in force: a reload may have changed the
    /// rules or the timeout) and carries out what it returns.
    private func handle(_ event: (inout Offers) -> [Offers.Action]) {
        dispatchPrecondition(condition: .onQueue(agent.queue))
        offers.configuredRules = Self.rules(of: agent.config)
        offers.timeoutSeconds = agent.config.limits.resolverTimeoutSeconds
        for action in event(&offers) { execute(action) }
    }

    /// Each database's rules and catch-all, as the config says.
    private static func rules(of config: AgentConfig) -> [DatabaseName: ResolutionRules] {
        Dictionary(uniqueKeysWithValues: config.allDatabases.map { ($0.name, $0.resolutionRules) })
    }

    private func execute(_ action: Offers.Action) {
        switch action {
        case .readConflicts(let name, let documents): read(documents, for: name)
        case .send(let connection, let offer): clients[connection]?.sendLine(offer.line)
        case .scheduleTimeout(let ticket, let seconds):
            let timeout = DispatchWorkItem { [weak self] in self?.handle { $0.timeoutFired(ticket: ticket) } }
            timeouts[ticket] = timeout
            agent.queue.asyncAfter(deadline: .now() + .seconds(seconds), execute: timeout)
        case .cancelTimeout(let ticket): timeouts.removeValue(forKey: ticket)?.cancel()
        case .scheduleRetry(let ticket, let seconds):
            agent.queue.asyncAfter(deadline: .now() + .seconds(seconds)) { [weak self] in self?.handle { $0.retryDue(ticket: ticket) } }
        case .apply(let batch): apply(batch)
        case .emit(let events):
            agent.events.emit(batch: events.map { event in
                switch event {
                case .document(let event, let database): .document(nodeID: "", event: event, database: database)
                case .disconnected(let name): .event(Admin.ResolverDisconnected(name: name))
                }
            })
        case .reply(let ticket, let document, let result):
            let reply = replies.removeValue(forKey: ticket)
            switch result {
            case .success(let revision):
                reply?(.success(Admin.AnswerResolver.Reply(db: document.database.text, doc: document.document, rev: revision)))
            case .failure(let refusal): reply?(.failure(Self.failure(refusal)))
            }
        case .policyChanged:
            // A policy the application set in its process (a `Node`'s database) stays in force.
            for (name, store) in agent.databases.sorted { store.applyConfiguredPolicy(.rules(offers.policy(for: name))) }
        case .scan: runScan()
        case .drainFinished: finishDrain()
        }
    }

    // MARK: Policy and scans

    /// Runs the policy over every conflicted document (`retryConflictResolution`): settles what it
    /// can now settle, and offers what waits for a connected resolver. At start and when a
    /// resolver registers.
    func scan() {
        handle { $0.scanRequested() }
    }

    /// The config was reloaded (`canopyctl reload`, SIGHUP): conflicts whose offers failed are
    /// offered again at once to their connected resolvers, then the scan runs.
    func reloaded() {
        handle { $0.reloaded() }
    }

    private func runScan() {
        agent.storeQueue.async { [agent] in
            for (name, store) in agent.databases.sorted {
                let results: [ForeignDocumentResult]
                do { results = try store.retryConflictResolution() } catch {
                    agent.logger.error(
                        "the conflict scan failed; kept conflicts are offered again on the next scan",
                        metadata: ["db": "\(name)", "error": "\(error)"])
                    continue
                }
                agent.events.emit(documentEvents: results.flatMap(DocumentEvent.scanEvents), peer: "", database: name)
            }
        }
    }

    // MARK: Conflicts arriving

    /// Takes note of a batch of document events of `database` (replication, import, scan; `peer`
    /// empty for the last two): conflicts now waiting for a resolver are offered, settled ones
    /// forgotten.
    func observe(_ events: [DocumentEvent], peer: String, database: DatabaseName) {
        // Most batches (every database's replication) carry no conflict: the machine would ignore
        // them, so they cost no refresh of the config's rules either.
        guard events.contains(where: { $0.kind == .conflictAwaitingResolver || $0.kind == .conflictResolved }) else { return }
        handle { $0.observe(events, peer: peer.isEmpty ? nil : peer, database: database) }
    }

    /// The document was settled some other way (`resolve`, a policy): no offer stands for it.
    func forget(_ document: String, in database: DatabaseName) {
        handle { $0.forget(Offers.Key(database, document)) }
    }

    /// The database was deleted: none of its conflicts waits any more, and its offers are void.
    func forget(database: DatabaseName) {
        handle { $0.forget(database: database) }
    }

    private func read(_ documents: [Offers.Key], for name: String) {
        agent.storeQueue.async { [agent] in
            var conflicts: [Offers.Key: Conflict] = [:]
            for (database, indexes) in Self.byDatabase(documents.map(\.database)) {
                // A database deleted meanwhile has no conflicts left to offer.
                guard let store = agent.databases[database] else { continue }
                do {
                    for conflict in try store.conflicts(ids: indexes.map { documents[$0].document }) {
                        conflicts[Offers.Key(database, conflict.documentID)] = conflict
                    }
                } catch {
                    agent.logger.error(
                        "reading conflicts to offer failed", metadata: ["resolver": "\(name)", "db": "\(database)", "error": "\(error)"])
                }
            }
            let found = conflicts
            agent.queue.async { self.handle { $0.conflictsRead(found, asked: documents, resolver: name) } }
        }
    }
    // MARK: Answers

    /// `resolver.answer {ticket, pick|body|delete}` from `client`.
    func answer(
        _ command: Admin.AnswerResolver, client: AdminClient, reply: @escaping TypedAdminRoute<Admin.AnswerResolver>.Reply
    ) throws(AdminFailure) {
        dispatchPrecondition(condition: .onQueue(agent.queue))
        guard let name = offers.resolver(on: ObjectIdentifier(client)) else {
            throw AdminFailure(.invalidRequest, "this connection is not a registered resolver")
        }
        // `validate` has checked that there is one.
        let ticket = command.ticket ?? 0
        guard let document = offers.document(offeredAs: ticket, to: name) else {
            throw AdminFailure(
                .notFound,
                "ticket \(ticket) is unknown, void or expired: its conflict was settled meanwhile, or changed and is offered again with a new ticket, or it timed out and is offered again later")
        }
        let decision: ResolutionDecision
        do { decision = try Agent.decision(from: command.resolution, documentID: document.document) } catch {
            handle { $0.answerRefused(ticket: ticket, reason: "resolver \(name)'s answer was refused: \(error.message)") }
            throw error
        }
        replies[ticket] = reply
        handle { $0.answerReceived(ticket: ticket, decision: decision) }
    }

    /// Writes a batch of answers, one transaction per database, and reports each one's result
    /// in the batch's order.
    private func apply(_ batch: [Offers.PendingAnswer]) {
        agent.storeQueue.async { [agent] in
            var results = [Result<RevisionID, Offers.Refusal>?](repeating: nil, count: batch.count)
            for (database, indexes) in Self.byDatabase(batch.map(\.document.database)) {
                guard let store = agent.databases[database] else {
                    let gone = Offers.Refusal(code: AdminErrorCode.notFound.rawValue, message: "database \(database) no longer exists")
                    for index in indexes { results[index] = .failure(gone) }
                    continue
                }
                do throws(StoreError) {
                    let written = try store.applyResolutions(indexes.map { (id: batch[$0].document.document, decision: batch[$0].decision) })
                    for (index, result) in zip(indexes, written) {
                        results[index] = result.mapError { Self.refusal(for: $0, document: batch[index].document.document) }
                    }
                } catch {
                    for index in indexes { results[index] = .failure(Self.refusal(for: error, document: batch[index].document.document)) }
                }
            }
            let answered = results.map { $0! }
            agent.queue.async { self.handle { $0.answersApplied(answered) } }
        }
    }

    /// The positions of `databases` grouped by database, databases in first-appearance order: one
    /// read or one transaction per database, in a deterministic order.
    private static func byDatabase(_ databases: [DatabaseName]) -> [(database: DatabaseName, indexes: [Int])] {
        var groups: [(database: DatabaseName, indexes: [Int])] = []
        var position: [DatabaseName: Int] = [:]
        for (index, database) in databases.enumerated() {
            if let known = position[database] {
                groups[known].indexes.append(index)
            } else {
                position[database] = groups.count
                groups.append((database, [index]))
            }
        }
        return groups
    }

    /// An answer the store could not apply, as the client is told.
    private static func refusal(for error: StoreError, document: String) -> Offers.Refusal {
        let failure: AdminFailure
        if case .handlerFailed(_, let underlying) = error, let plan = underlying as? ConflictResolution.PlanError {
            switch plan {
            case .notConflicted:
                failure = AdminFailure(.notConflicted, "document \"\(document.prefix(80))\" is no longer conflicted; nothing to resolve")
            case .notAConflictingLeaf(let revision):
                failure = AdminFailure(.invalidArgument, "\(revision) is not one of the open leaves of \"\(document.prefix(80))\"; the conflict is kept")
            case .bodyUnavailable(let revision):
                failure = AdminFailure(.failed, "the body of \(revision) is no longer stored; answer with a body or another leaf")
            }
        } else {
            failure = Agent.failure(for: error)
        }
        return Offers.Refusal(code: failure.code.rawValue, message: failure.message)
    }

    private static func failure(_ refusal: Offers.Refusal) -> AdminFailure {
        AdminFailure(AdminErrorCode(rawValue: refusal.code) ?? .failed, refusal.message)
    }

    // MARK: Registration

    /// `resolver.register {name?, prefix?}`.
    func register(
        _ command: Admin.RegisterResolver, client: AdminClient, reply: @escaping TypedAdminRoute<Admin.RegisterResolver>.Reply
    ) throws(AdminFailure) {
        dispatchPrecondition(condition: .onQueue(agent.queue))
        let name = command.name ?? "default"
        let prefix = command.prefix
        let connection = ObjectIdentifier(client)
        offers.configuredRules = Self.rules(of: agent.config)
        let registered: (prefix: String?, actions: [Offers.Action])
        do { registered = try offers.register(name: name, prefix: prefix, connection: connection) } catch {
            throw Self.failure(error)
        }
        clients[connection] = client
        client.holdsStream()
        client.onClose { [weak self] in
            guard let self else { return }
            self.agent.queue.async {
                self.handle { $0.disconnected(connection) }
                self.clients.removeValue(forKey: connection)
            }
        }
        reply(.success(Admin.RegisterResolver.Reply(name: name, prefix: registered.prefix)))
        handle { _ in registered.actions }
    }

    // MARK: Status and shutdown

    /// The documents of `database` whose conflicts wait for a resolver (connected or not).
    func waitingDocuments(in database: DatabaseName) -> Set<String> { offers.waitingDocuments(in: database) }

    /// The resolver each waiting conflict is kept for, by database and document.
    var waitingResolvers: [ResolverOffers<ObjectIdentifier>.Key: String] { offers.waitingResolvers }

    /// The connected resolvers as `status` lists them.
    var statusRows: [Admin.ResolverRow] {
        offers.registrationRows.map { row in
            Admin.ResolverRow(name: row.name, prefix: row.prefix, offered: Int64(row.offered), waiting: Int64(row.waiting))
        }
    }

    /// Stops offering, and calls `completion` once every offer sent has been answered (and the
    /// answers written) or `AgentLimits.resolverShutdownGraceSeconds` have passed.
    func drain(_ completion: @escaping @Sendable () -> Void) {
        dispatchPrecondition(condition: .onQueue(agent.queue))
        drained.append(completion)
        agent.queue.asyncAfter(deadline: .now() + AgentLimits.resolverShutdownGraceSeconds) { [weak self] in
            self?.finishDrain()
        }
        handle { $0.drain() }
    }

    private func finishDrain() {
        let waiters = drained
        drained = []
        for waiter in waiters { waiter() }
    }
}
