import CanopyCore
import CanopyStore
import Dispatch

/// An application resolver connected over the admin socket (`resolver.register`): the agent sends
/// it each conflicted document (optionally only ids with a prefix) as a line
/// `{"resolve":{"ticket":T,"doc":ID,"rev":CURRENT,"leaves":[{"rev","deleted","body"}…]}}` and
/// applies its `resolver.answer`. No answer within `AgentLimits.resolverTimeoutSeconds`, or a
/// disconnect, keeps the conflict (an event says so) and the next pass asks again: a conflict is
/// never dropped.
///
/// Invariants (all on the agent's `queue`): one ticket outstanding per document; tickets are
/// never reused; the store is touched only on the agent's `storeQueue`.
final class ResolverBroker: @unchecked Sendable {
    let client: AdminClient
    let prefix: String
    private unowned let agent: Agent
    private var nextTicket: Int64 = 1
    private var outstanding: [Int64: String] = [:]
    private var timer: (any DispatchSourceTimer)?
    private var stopped = false

    /// Seconds between passes over the conflicted documents.
    static let passIntervalSeconds = 2.0

    init(agent: Agent, client: AdminClient, prefix: String) {
        self.agent = agent
        self.client = client
        self.prefix = prefix
    }

    /// Starts periodic passes (the first at once).
    func start() {
        dispatchPrecondition(condition: .onQueue(agent.queue))
        let source = DispatchSource.makeTimerSource(queue: agent.queue)
        source.schedule(deadline: .now(), repeating: Self.passIntervalSeconds)
        source.setEventHandler { [weak self] in self?.pass() }
        timer = source
        source.resume()
    }

    /// Stops asking; outstanding conflicts stay as they are.
    func stop() {
        dispatchPrecondition(condition: .onQueue(agent.queue))
        stopped = true
        timer?.cancel()
        timer = nil
        outstanding = [:]
    }

    /// Sends every conflicted document not already waiting for an answer.
    private func pass() {
        dispatchPrecondition(condition: .onQueue(agent.queue))
        guard !stopped else { return }
        let waiting = Set(outstanding.values)
        let prefix = self.prefix
        agent.storeQueue.async { [agent] in
            let ids = ((try? agent.store.conflictedDocumentIDs()) ?? []).filter { $0.hasPrefix(prefix) && !waiting.contains($0) }
            let questions = ids.prefix(AgentLimits.resolverBatchMax).compactMap { Self.question(agent.store, id: $0) }
            agent.queue.async { self.ask(questions) }
        }
    }

    private func ask(_ questions: [(id: String, fields: [String: JSONValue])]) {
        dispatchPrecondition(condition: .onQueue(agent.queue))
        guard !stopped else { return }
        for question in questions where !outstanding.values.contains(question.id) {
            let ticket = nextTicket
            nextTicket += 1
            outstanding[ticket] = question.id
            var fields = question.fields
            fields["ticket"] = .int(ticket)
            client.sendLine(.object(["resolve": .object(fields)]))
            agent.queue.asyncAfter(deadline: .now() + AgentLimits.resolverTimeoutSeconds) { [weak self] in
                guard let self, let id = self.outstanding.removeValue(forKey: ticket) else { return }
                self.agent.events.emit("resolution.failed", ["doc": .string(id), "reason": .string("resolver did not answer in time; conflict kept")])
            }
        }
    }

    /// The conflict as the resolver sees it: every open leaf with its body, canonical order.
    private static func question(_ store: DocumentStore, id: String) -> (id: String, fields: [String: JSONValue])? {
        guard let current = try? store.get(id: id, options: .conflicts) else { return nil }
        let others = (current.conflicts ?? []) + (current.deletedConflicts ?? [])
        var leaves: [JSONValue] = []
        for revision in [current.revision] + others {
            guard let leaf = try? store.get(id: id, rev: revision) else { continue }
            leaves.append(.object(["rev": .string(revision.description), "deleted": .bool(leaf.isDeleted), "body": leaf.body]))
        }
        return (id, ["doc": .string(id), "rev": .string(current.revision.description), "leaves": .array(leaves)])
    }

    /// Applies an answer. Throws `notFound` for an unknown or expired ticket.
    func answer(_ request: AdminRequest, reply: @escaping AdminReply) throws(AdminFailure) {
        dispatchPrecondition(condition: .onQueue(agent.queue))
        guard let ticket = try request.optionalInt("ticket", in: 1...Int64.max) else {
            throw AdminFailure(.invalidArgument, "\"resolver.answer\" needs \"ticket\": an integer")
        }
        let decision = try Agent.decision(from: request, documentID: outstanding[ticket])
        guard let id = outstanding.removeValue(forKey: ticket) else {
            throw AdminFailure(.notFound, "ticket \(ticket) is unknown or expired; the conflict will be offered again")
        }
        agent.storeQueue.async { [agent] in
            do {
                try agent.checkApplicable(decision, to: id)
                let revision = try agent.store.resolveConflicts(id: id, resolver: ClosureResolver { _ in decision })
                agent.events.emit("conflict.resolved", ["doc": .string(id), "rev": .string(revision.description), "by": .string("resolver")])
                reply(.success(["doc": .string(id), "rev": .string(revision.description)]))
            } catch let failure as AdminFailure {
                agent.events.emit("resolution.failed", ["doc": .string(id), "reason": .string(failure.message)])
                reply(.failure(failure))
            } catch let error as StoreError {
                agent.events.emit("resolution.failed", ["doc": .string(id), "reason": .string(error.description)])
                reply(.failure(Agent.failure(for: error)))
            } catch {
                reply(.failure(AdminFailure(.failed, "\(error)")))
            }
        }
    }
}

extension Agent {
    /// `resolver.register {prefix?}` and `resolver.answer {ticket, pick|body|delete}`.
    func resolverCommand(_ request: AdminRequest, client: AdminClient, _ reply: @escaping AdminReply) throws(AdminFailure) {
        dispatchPrecondition(condition: .onQueue(queue))
        if request.command == "resolver.answer" {
            guard let resolver, resolver.client === client else {
                throw AdminFailure(.invalidRequest, "this connection is not the registered resolver")
            }
            return try resolver.answer(request, reply: reply)
        }
        guard resolver == nil else { throw AdminFailure(.failed, "another client is already the resolver") }
        let broker = ResolverBroker(agent: self, client: client, prefix: try request.optionalString("prefix") ?? "")
        resolver = broker
        client.onClose { [weak self, weak broker] in
            guard let self, let broker else { return }
            self.queue.async {
                guard self.resolver === broker else { return }
                broker.stop()
                self.resolver = nil
                self.events.emit("resolver.disconnected", [:])
            }
        }
        reply(.success(["prefix": .string(broker.prefix)]))
        broker.start()
    }
}
