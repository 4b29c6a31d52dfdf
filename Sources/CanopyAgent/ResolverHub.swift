import CanopyCore
import CanopyReplication
import CanopyStore
import DequeModule
import Dispatch

/// Application resolvers connected over the admin socket (`resolver.register`), and the conflicts
/// waiting for them (`Protocol/admin-v1.md` §5, *Resolvers*).
///
/// A conflict waits for a resolver when its rule names one (`resolver NAME`), or when a connected
/// resolver registered a prefix its id starts with and no config rule covers it. It is offered as
/// soon as the write that left it is durable: the replication batch's, the import's, or the scan
/// that runs when the agent starts, when the config is reloaded and when a resolver registers.
/// Nothing polls. An offer that gets no answer in time, a refused answer and a disconnect keep
/// the conflict (`resolution.failed`); it is offered again when its resolver registers again,
/// when the agent restarts and when the document changes again.
///
/// Answers are applied in batches, one transaction per batch (`DocumentStore.applyResolutions`),
/// so a resolver that pipelines its answers is not held to one commit per conflict.
///
/// Invariants (all state on the agent's `queue`; the store is touched only on `storeQueue`): a
/// document has at most one offer outstanding; a ticket is never reused; at most
/// `AgentLimits.resolverOffersInFlightMax` offers are outstanding per resolver.
final class ResolverHub: @unchecked Sendable {
    /// A connected resolver.
    private struct Registration {
        let name: String
        /// The ids it claims beyond what rules route to it; nil: none.
        let prefix: String?
        let client: AdminClient
        /// Tickets sent and not yet answered.
        var outstanding: Set<Int64> = []
        /// Documents to offer, in arrival order.
        var toOffer: Deque<String> = []
        /// A read of conflicts to offer is running on the store queue.
        var reading = false
    }

    /// A conflict kept for a resolver.
    private struct Waiting {
        var resolver: String
        /// The rule that routed it (nil: the catch-all).
        var rule: String?
        /// The node's current revision before the write that left the conflict.
        var previous: RevisionID?
        /// The peer whose revisions made it (nil: an import, or found by a scan).
        var peer: String?
        /// The offer outstanding, if one is.
        var ticket: Int64?
        /// Offered and not settled (no answer in time, a refused answer, a disconnect): not offered
        /// again until its resolver registers again, the agent restarts or the document changes.
        var failed = false
    }

    /// An offer sent.
    private struct Ticket {
        let document: String
        let resolver: String
        let timeout: DispatchWorkItem
    }

    /// An answer waiting for its batch's transaction.
    private struct Answer {
        let ticket: Int64
        let document: String
        let resolver: String
        let decision: ResolutionDecision
        let reply: AdminReply
    }

    private unowned let agent: Agent
    private var registrations: [String: Registration] = [:]
    private var waiting: [String: Waiting] = [:]
    private var tickets: [Int64: Ticket] = [:]
    private var nextTicket: Int64 = 1
    private var answers: [Answer] = []
    private var applying = false
    private var stopping = false
    private var drained: [@Sendable () -> Void] = []

    init(agent: Agent) {
        self.agent = agent
    }

    // MARK: Policy and scans

    /// The store's policy: the config's rules, then a rule per connected resolver for its prefix,
    /// then the `conflicts` catch-all.
    func applyPolicy() {
        dispatchPrecondition(condition: .onQueue(agent.queue))
        var rules = agent.config.rules
        for registration in registrations.values.sorted(by: { $0.name < $1.name }) {
            guard let prefix = registration.prefix else { continue }
            rules.append(ResolutionRule(name: registration.name, idPrefix: prefix, strategy: .resolver(registration.name)))
        }
        agent.store.conflictPolicy = .rules(ResolutionRules(rules, fallback: agent.config.conflicts))
    }

    /// Runs the policy over every conflicted document (`retryConflictResolution`): settles what it
    /// can now settle, and offers what waits for a connected resolver. At start, on reload and when
    /// a resolver registers.
    func scan() {
        dispatchPrecondition(condition: .onQueue(agent.queue))
        applyPolicy()
        agent.storeQueue.async { [agent] in
            let results: [ForeignDocumentResult]
            do { results = try agent.store.retryConflictResolution() } catch {
                agent.logger.error("the conflict scan failed; kept conflicts are offered again on the next scan", metadata: ["error": "\(error)"])
                return
            }
            agent.events.emit(documentEvents: results.flatMap(Self.scanEvents), peer: "")
        }
    }

    /// A scan's events: how the policy left each conflict it settled or routed (no
    /// `conflict.detected`: each was detected when it arose). A conflict still waiting carries no
    /// `conflict`, which tells `observe` it was found again, not changed: an offer outstanding
    /// for it stands.
    private static func scanEvents(_ result: ForeignDocumentResult) -> [DocumentEvent] {
        DocumentEvent.conflictEvents(for: result).compactMap { event in
            switch event.kind {
            case .conflictDetected: return nil
            case .conflictAwaitingResolver:
                return DocumentEvent(kind: event.kind, documentID: event.documentID, revision: event.revision, detail: event.detail)
            default: return event
            }
        }
    }

    // MARK: Conflicts arriving

    /// Takes note of a batch of document events (replication, import, scan): conflicts now
    /// waiting for a resolver are offered, settled ones forgotten.
    func observe(_ events: [DocumentEvent], peer: String) {
        dispatchPrecondition(condition: .onQueue(agent.queue))
        for event in events {
            switch event.kind {
            case .conflictAwaitingResolver:
                guard let resolver = event.detail else { continue }
                keepWaiting(event.documentID, resolver: resolver, conflict: event.conflict, peer: peer.isEmpty ? nil : peer)
            case .conflictResolved:
                forget(event.documentID)
            default:
                continue
            }
        }
    }

    /// The document was settled some other way (`resolve`, a policy): no offer stands for it.
    func forget(_ document: String) {
        dispatchPrecondition(condition: .onQueue(agent.queue))
        guard let entry = waiting.removeValue(forKey: document) else { return }
        if let ticket = entry.ticket { withdraw(ticket) }
    }

    private func keepWaiting(_ document: String, resolver: String, conflict: DetectedConflict?, peer: String?) {
        var entry = Waiting(resolver: resolver, rule: conflict?.rule, previous: conflict?.previous, peer: peer)
        if let known = waiting[document] {
            // Found again by a scan: keep what the write that made it knew, and its offer.
            if conflict == nil && known.resolver == resolver { return }
            if let ticket = known.ticket { withdraw(ticket) }
            if conflict == nil { entry.previous = known.previous; entry.peer = known.peer; entry.rule = known.rule }
        }
        waiting[document] = entry
        guard registrations[resolver] != nil else { return }
        registrations[resolver]!.toOffer.append(document)
        pump(resolver)
    }

    /// Voids an offer: its answer, if it comes, gets `not_found`.
    private func withdraw(_ ticket: Int64) {
        guard let sent = tickets.removeValue(forKey: ticket) else { return }
        sent.timeout.cancel()
        registrations[sent.resolver]?.outstanding.remove(ticket)
        waiting[sent.document]?.ticket = nil
    }

    // MARK: Offers

    /// Reads the next conflicts to offer `name`, within its in-flight limit.
    private func pump(_ name: String) {
        guard !stopping, var registration = registrations[name], !registration.reading else { return }
        let room = AgentLimits.resolverOffersInFlightMax - registration.outstanding.count
        var batch: [String] = []
        while batch.count < min(room, 512), let document = registration.toOffer.popFirst() {
            guard let entry = waiting[document], entry.resolver == name, entry.ticket == nil, !entry.failed else { continue }
            batch.append(document)
        }
        registration.reading = !batch.isEmpty
        registrations[name] = registration
        guard !batch.isEmpty else { return }
        agent.storeQueue.async { [agent, batch] in
            let conflicts: [Conflict]
            do { conflicts = try agent.store.conflicts(ids: batch) } catch {
                agent.logger.error("reading conflicts to offer failed", metadata: ["resolver": "\(name)", "error": "\(error)"])
                conflicts = []
            }
            agent.queue.async { self.offer(conflicts, asked: batch, to: name) }
        }
    }

    private func offer(_ conflicts: [Conflict], asked: [String], to name: String) {
        dispatchPrecondition(condition: .onQueue(agent.queue))
        guard registrations[name] != nil else { return }
        registrations[name]!.reading = false
        let found = Set(conflicts.map(\.documentID))
        for document in asked where !found.contains(document) && waiting[document]?.ticket == nil {
            waiting.removeValue(forKey: document)  // settled meanwhile, or gone
        }
        for conflict in conflicts {
            guard let entry = waiting[conflict.documentID], entry.resolver == name, entry.ticket == nil, !entry.failed else { continue }
            send(conflict, entry, to: name)
        }
        pump(name)
    }

    private func send(_ conflict: Conflict, _ entry: Waiting, to name: String) {
        let ticket = nextTicket
        nextTicket += 1
        let document = conflict.documentID
        let seconds = agent.config.limits.resolverTimeoutSeconds
        let timeout = DispatchWorkItem { [weak self] in
            self?.failed(ticket: ticket, reason: "resolver \(name) did not answer within \(seconds) s; conflict kept")
        }
        tickets[ticket] = Ticket(document: document, resolver: name, timeout: timeout)
        registrations[name]!.outstanding.insert(ticket)
        waiting[document]!.ticket = ticket
        registrations[name]!.client.sendLine(.object(["resolve": .object(Self.offerFields(conflict, entry, ticket: ticket, resolver: name))]))
        agent.queue.asyncAfter(deadline: .now() + .seconds(seconds), execute: timeout)
    }

    /// The offer as `Protocol/admin-v1.md` §5 specifies it: every open leaf (current first,
    /// deletions marked), the common ancestor's body, what this node had before, and who sent it.
    private static func offerFields(_ conflict: Conflict, _ entry: Waiting, ticket: Int64, resolver: String) -> [String: JSONValue] {
        let leaves: [JSONValue] = conflict.leaves.map { leaf in
            .object(["rev": .string(leaf.revision.description), "deleted": .bool(leaf.isDeleted), "body": leaf.body ?? .null])
        }
        return [
            "ticket": .int(ticket), "resolver": .string(resolver), "doc": .string(conflict.documentID),
            "rev": .string(conflict.leaves[0].revision.description), "leaves": .array(leaves),
            "ancestor": conflict.commonAncestorBody ?? .null,
            "local_rev": entry.previous.map { .string($0.description) } ?? .null,
            "node_id": entry.peer.map { .string($0) } ?? .null,
            "rule": entry.rule.map { .string($0) } ?? .null,
        ]
    }

    // MARK: Answers

    /// `resolver.answer {ticket, pick|body|delete}` from `client`.
    func answer(_ request: AdminRequest, client: AdminClient, reply: @escaping AdminReply) throws(AdminFailure) {
        dispatchPrecondition(condition: .onQueue(agent.queue))
        guard let registration = registrations.values.first(where: { $0.client === client }) else {
            throw AdminFailure(.invalidRequest, "this connection is not a registered resolver")
        }
        guard let ticket = try request.optionalInt("ticket", in: 1...Int64.max) else {
            throw AdminFailure(.invalidArgument, "\"resolver.answer\" needs \"ticket\": an integer")
        }
        guard let sent = tickets[ticket], sent.resolver == registration.name else {
            throw AdminFailure(.notFound, "ticket \(ticket) is unknown or expired; the conflict will be offered again")
        }
        let decision: ResolutionDecision
        do { decision = try Agent.decision(from: request, documentID: sent.document) } catch {
            failed(ticket: ticket, reason: "resolver \(registration.name)'s answer was refused: \(error.message)")
            throw error
        }
        sent.timeout.cancel()
        tickets.removeValue(forKey: ticket)
        registrations[registration.name]?.outstanding.remove(ticket)
        answers.append(Answer(ticket: ticket, document: sent.document, resolver: registration.name, decision: decision, reply: reply))
        applyAnswers()
        pump(registration.name)
    }

    /// Writes the answers that came in, one transaction for all of them; the answers that come
    /// meanwhile form the next batch.
    private func applyAnswers() {
        guard !applying, !answers.isEmpty else { return finishDrainIfIdle() }
        applying = true
        let batch = answers
        answers = []
        agent.storeQueue.async { [agent] in
            let outcome = Result { () throws(StoreError) in
                try agent.store.applyResolutions(batch.map { (id: $0.document, decision: $0.decision) })
            }
            agent.queue.async { self.applied(batch, outcome) }
        }
    }

    private func applied(_ batch: [Answer], _ outcome: Result<[Result<RevisionID, StoreError>], StoreError>) {
        dispatchPrecondition(condition: .onQueue(agent.queue))
        applying = false
        var resolved: [AgentEvent.Content] = []
        for (index, answer) in batch.enumerated() {
            let result: Result<RevisionID, StoreError>
            switch outcome {
            case .success(let results): result = results[index]
            case .failure(let error): result = .failure(error)
            }
            // A newer offer for the document (it changed meanwhile) stands; this answer's is done.
            let current = waiting[answer.document]?.ticket == answer.ticket
            if current { waiting[answer.document]?.ticket = nil }
            switch result {
            case .success(let revision):
                if current { waiting.removeValue(forKey: answer.document) }
                resolved.append(.fields(type: "conflict.resolved", data: [
                    "doc": .string(answer.document), "rev": .string(revision.description), "by": .string(answer.resolver),
                ]))
                answer.reply(.success(["doc": .string(answer.document), "rev": .string(revision.description)]))
            case .failure(let error):
                let failure = Self.failure(for: error, document: answer.document)
                markFailed(answer.document, resolver: answer.resolver, reason: "resolver \(answer.resolver)'s answer was refused: \(failure.message)")
                answer.reply(.failure(failure))
            }
        }
        agent.events.emit(batch: resolved)
        applyAnswers()
    }

    /// An answer the store could not apply, as the client is told.
    private static func failure(for error: StoreError, document: String) -> AdminFailure {
        if case .handlerFailed(_, let underlying) = error, let plan = underlying as? ConflictResolution.PlanError {
            switch plan {
            case .notConflicted:
                return AdminFailure(.notConflicted, "document \"\(document.prefix(80))\" is no longer conflicted; nothing to resolve")
            case .notAConflictingLeaf(let revision):
                return AdminFailure(.invalidArgument, "\(revision) is not one of the open leaves of \"\(document.prefix(80))\"; the conflict is kept")
            case .bodyUnavailable(let revision):
                return AdminFailure(.failed, "the body of \(revision) is no longer stored; answer with a body or another leaf")
            }
        }
        return Agent.failure(for: error)
    }

    // MARK: Failures

    private func failed(ticket: Int64, reason: String) {
        guard let sent = tickets[ticket] else { return }
        withdraw(ticket)
        markFailed(sent.document, resolver: sent.resolver, reason: reason)
        finishDrainIfIdle()
    }

    private func markFailed(_ document: String, resolver: String, reason: String) {
        waiting[document]?.failed = true
        agent.events.emit("resolution.failed", ["doc": .string(document), "reason": .string(reason), "resolver": .string(resolver)])
    }

    // MARK: Registration

    /// `resolver.register {name?, prefix?}`.
    func register(_ request: AdminRequest, client: AdminClient, reply: @escaping AdminReply) throws(AdminFailure) {
        dispatchPrecondition(condition: .onQueue(agent.queue))
        let name = try request.optionalString("name") ?? "default"
        guard ResolutionStrategy.isValidResolverName(name) else {
            throw AdminFailure(.invalidArgument, "resolver name \"\(name.prefix(80))\" must be 1–64 letters, digits, '-', '_' or '.'")
        }
        // Without a prefix, a resolver that rules name gets what they route to it; any other
        // claims every conflict no rule covers.
        let named = agent.config.rules.contains { $0.strategy == .resolver(name) } || agent.config.conflicts == .resolver(name)
        let prefix = try request.optionalString("prefix") ?? (named ? nil : "")
        guard registrations[name] == nil else {
            throw AdminFailure(.failed, "a resolver named \(name) is already registered; pick another \"name\"")
        }
        guard !registrations.values.contains(where: { $0.client === client }) else {
            throw AdminFailure(.failed, "this connection is already a registered resolver")
        }
        guard registrations.count < AgentLimits.resolversMax else {
            throw AdminFailure(.failed, "\(AgentLimits.resolversMax) resolvers are registered already")
        }
        registrations[name] = Registration(name: name, prefix: prefix, client: client)
        let connection = ObjectIdentifier(client)
        client.onClose { [weak self] in
            guard let self else { return }
            self.agent.queue.async { self.disconnected(name, connection) }
        }
        reply(.success(["name": .string(name), "prefix": prefix.map(JSONValue.string) ?? .null]))
        // Its conflicts that failed before are offered again, with what the scan finds.
        for (document, entry) in waiting where entry.resolver == name {
            waiting[document]!.failed = false
            registrations[name]!.toOffer.append(document)
        }
        pump(name)
        scan()
    }

    private func disconnected(_ name: String, _ connection: ObjectIdentifier) {
        dispatchPrecondition(condition: .onQueue(agent.queue))
        guard let registration = registrations[name], ObjectIdentifier(registration.client) == connection else { return }
        registrations.removeValue(forKey: name)
        for ticket in registration.outstanding.sorted() {
            guard let sent = tickets.removeValue(forKey: ticket) else { continue }
            sent.timeout.cancel()
            waiting[sent.document]?.ticket = nil
            markFailed(sent.document, resolver: name, reason: "resolver \(name) disconnected before answering; conflict kept")
        }
        agent.events.emit("resolver.disconnected", ["name": .string(name)])
        applyPolicy()
        finishDrainIfIdle()
    }

    // MARK: Status and shutdown

    /// Conflicts waiting for a resolver (connected or not), by document.
    var waitingDocuments: Set<String> { Set(waiting.keys) }

    /// The connected resolvers as `status` lists them.
    var statusRows: [JSONValue] {
        registrations.values.sorted { $0.name < $1.name }.map { registration in
            .object([
                "name": .string(registration.name), "prefix": registration.prefix.map(JSONValue.string) ?? .null,
                "offered": .int(Int64(registration.outstanding.count)),
                "waiting": .int(Int64(waiting.values.filter { $0.resolver == registration.name }.count)),
            ])
        }
    }

    /// Stops offering, and calls `completion` once every offer sent has been answered (and the
    /// answers written) or `AgentLimits.resolverShutdownGraceSeconds` have passed.
    func drain(_ completion: @escaping @Sendable () -> Void) {
        dispatchPrecondition(condition: .onQueue(agent.queue))
        stopping = true
        drained.append(completion)
        agent.queue.asyncAfter(deadline: .now() + AgentLimits.resolverShutdownGraceSeconds) { [weak self] in
            self?.finishDrain()
        }
        finishDrainIfIdle()
    }

    private func finishDrainIfIdle() {
        guard stopping, tickets.isEmpty, answers.isEmpty, !applying else { return }
        finishDrain()
    }

    private func finishDrain() {
        let waiters = drained
        drained = []
        for waiter in waiters { waiter() }
    }
}
