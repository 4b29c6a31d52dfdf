import CanopyCore

/// Registrations, answers, failures and draining (`Protocol/admin-v1.md` §5, *Resolvers*).
extension ResolverOffers {
    // MARK: Registration

    /// `resolver.register {name?, prefix?}` from `connection`: returns the prefix the resolver
    /// claims (nil: only what rules route to it) and what to do once the reply is sent. Without
    /// a prefix, a resolver that the config's rules or catch-all name claims only what they route
    /// to it; any other claims every conflict no rule covers (`""`). Its conflicts that failed
    /// before are offered again, with what the scan finds.
    package mutating func register(
        name: String?, prefix: String?, connection: Connection
    ) throws(Refusal) -> (prefix: String?, actions: [Action]) {
        let name = name ?? "default"
        guard ResolutionStrategy.isValidResolverName(name) else {
            throw Refusal(code: "invalid_argument", message: "resolver name \"\(name.prefix(80))\" must be 1–64 letters, digits, '-', '_' or '.'")
        }
        let named = configuredRules.values.contains { rules in
            rules.rules.contains { $0.strategy == .resolver(name) } || rules.fallback == .resolver(name)
        }
        let prefix = prefix ?? (named ? nil : "")
        guard registrations[name] == nil else {
            throw Refusal(code: "failed", message: "a resolver named \(name) is already registered; pick another \"name\"")
        }
        guard !registrations.values.contains(where: { $0.connection == connection }) else {
            throw Refusal(code: "failed", message: "this connection is already a registered resolver")
        }
        guard registrations.count < resolversMax else {
            throw Refusal(code: "failed", message: "\(resolversMax) resolvers are registered already")
        }
        var registration = Registration(name: name, prefix: prefix, connection: connection)
        for document in waiting.keys.sorted() where waiting[document]!.resolver == name {
            waiting[document]!.failed = false
            waiting[document]!.timeouts = 0
            waiting[document]!.retryTicket = nil
            registration.toOffer.append(document)
        }
        registrations[name] = registration
        var actions: [Action] = []
        pump(name, &actions)
        return (prefix, actions + scanRequested())
    }

    /// The connection closed: if it was a resolver's, every offer it had outstanding fails.
    package mutating func disconnected(_ connection: Connection) -> [Action] {
        guard let registration = registrations.values.first(where: { $0.connection == connection }) else { return [] }
        let name = registration.name
        registrations.removeValue(forKey: name)
        var actions: [Action] = []
        for ticket in registration.outstanding.sorted() {
            guard let sent = tickets.removeValue(forKey: ticket) else { continue }
            actions.append(.cancelTimeout(ticket: ticket))
            waiting[sent.document]?.ticket = nil
            markFailed(sent.document, resolver: name, reason: "resolver \(name) disconnected before answering; conflict kept", &actions)
        }
        actions.append(.emit([.disconnected(name: name)]))
        actions.append(.policyChanged)
        finishDrainIfIdle(&actions)
        return actions
    }

    // MARK: Answers

    /// The resolver registered on `connection`, if any.
    package func resolver(on connection: Connection) -> String? {
        registrations.values.first { $0.connection == connection }?.name
    }

    /// The document `ticket` was offered for, when it is outstanding and was sent to `resolver`;
    /// nil for an unknown, void or expired ticket (the answer gets `not_found`).
    package func document(offeredAs ticket: Int64, to resolver: String) -> Key? {
        guard let sent = tickets[ticket], sent.resolver == resolver else { return nil }
        return sent.document
    }

    /// An answer to the outstanding `ticket` whose decision could not be read (`reason` says
    /// why): the offer fails.
    package mutating func answerRefused(ticket: Int64, reason: String) -> [Action] {
        failed(ticket: ticket, reason: reason)
    }

    /// An answer to the outstanding `ticket` (check it with `document(offeredAs:to:)` first): it
    /// joins the next batch to write, and the resolver has room for another offer.
    package mutating func answerReceived(ticket: Int64, decision: ResolutionDecision) -> [Action] {
        guard let sent = tickets.removeValue(forKey: ticket) else { return [] }
        var actions: [Action] = [.cancelTimeout(ticket: ticket)]
        registrations[sent.resolver]?.outstanding.remove(ticket)
        answers.append(PendingAnswer(ticket: ticket, document: sent.document, resolver: sent.resolver, decision: decision))
        applyAnswers(&actions)
        pump(sent.resolver, &actions)
        return actions
    }

    /// Starts writing the answers that came in, as one batch; those that come meanwhile form the
    /// next one.
    private mutating func applyAnswers(_ actions: inout [Action]) {
        guard applying == nil, !answers.isEmpty else { return finishDrainIfIdle(&actions) }
        applying = answers
        answers = []
        actions.append(.apply(applying!))
    }

    /// The batch of `apply` was written: one result per answer, in order (the same failure for
    /// each when the transaction failed). Each answer is replied to; the settled ones are
    /// published as `conflict.resolved`, the refused ones fail.
    package mutating func answersApplied(_ results: [Result<RevisionID, Refusal>]) -> [Action] {
        guard let batch = applying else { return [] }
        precondition(results.count == batch.count, "one result per answer of the batch")
        applying = nil
        var actions: [Action] = []
        var resolved: [ResolverEvent] = []
        for (answer, result) in zip(batch, results) {
            // A newer offer for the document (it changed meanwhile) stands; this answer's is done.
            let current = waiting[answer.document]?.ticket == answer.ticket
            if current { waiting[answer.document]?.ticket = nil }
            switch result {
            case .success(let revision):
                if current { waiting.removeValue(forKey: answer.document) }
                resolved.append(.document(
                    DocumentEvent(kind: .conflictResolved, documentID: answer.document.document, revision: revision, detail: answer.resolver),
                    database: answer.document.database))
            case .failure(let refusal):
                // Reported either way; only the document's own offer fails (a newer one, for a
                // change made meanwhile, still goes out).
                markFailed(answer.document, resolver: answer.resolver, reason: "resolver \(answer.resolver)'s answer was refused: \(refusal.message)",
                           keep: !current, &actions)
            }
            actions.append(.reply(ticket: answer.ticket, document: answer.document, result))
        }
        if !resolved.isEmpty { actions.append(.emit(resolved)) }
        applyAnswers(&actions)
        return actions
    }

    // MARK: Failures

    /// The offer's timeout fired: if it is still outstanding, it fails, and the conflict is
    /// offered again after the backoff (`retryDelaySeconds`), unless the machine is draining.
    package mutating func timeoutFired(ticket: Int64) -> [Action] {
        guard let sent = tickets[ticket] else { return [] }
        let timeouts = (waiting[sent.document]?.timeouts ?? 0) + 1
        let delay = retryDelaySeconds(afterTimeouts: timeouts, timeoutSeconds: sent.timeoutSeconds)
        let again = stopping ? "" : ", offered again in \(delay) s"
        var actions = failed(ticket: ticket, reason: "resolver \(sent.resolver) did not answer within \(sent.timeoutSeconds) s; conflict kept\(again)")
        guard !stopping, waiting[sent.document]?.failed == true else { return actions }
        waiting[sent.document]!.timeouts = timeouts
        waiting[sent.document]!.retryTicket = ticket
        retries[ticket] = sent.document
        actions.append(.scheduleRetry(ticket: ticket, seconds: delay))
        return actions
    }

    /// The wait before offering again a conflict whose offers timed out `timeouts` times in a
    /// row: the timeout, doubled for each timeout after the first, at most `retryMaximumSeconds`.
    func retryDelaySeconds(afterTimeouts timeouts: Int, timeoutSeconds: Int) -> Int {
        let doublings = min(max(timeouts - 1, 0), 30)
        return max(1, min(max(timeoutSeconds, 1) << doublings, retryMaximumSeconds))
    }

    /// The backoff after the timeout of `ticket` has passed: its conflict is offered again if it
    /// is still failed from that timeout (not offered again meanwhile, changed or settled) and its
    /// resolver is connected. A retry that no longer applies does nothing.
    package mutating func retryDue(ticket: Int64) -> [Action] {
        guard let document = retries.removeValue(forKey: ticket), var entry = waiting[document], entry.failed,
            entry.retryTicket == ticket, !stopping
        else { return [] }
        entry.failed = false
        entry.retryTicket = nil
        waiting[document] = entry
        guard registrations[entry.resolver] != nil else { return [] }
        registrations[entry.resolver]!.toOffer.append(document)
        var actions: [Action] = []
        pump(entry.resolver, &actions)
        return actions
    }

    private mutating func failed(ticket: Int64, reason: String) -> [Action] {
        guard let sent = tickets[ticket] else { return [] }
        var actions: [Action] = []
        withdraw(ticket, &actions)
        markFailed(sent.document, resolver: sent.resolver, reason: reason, &actions)
        finishDrainIfIdle(&actions)
        return actions
    }

    /// Reports the failure, and marks the document's conflict failed unless `keep` (the failure
    /// was an earlier offer's).
    private mutating func markFailed(_ document: Key, resolver: String, reason: String, keep: Bool = false, _ actions: inout [Action]) {
        if !keep { waiting[document]?.failed = true }
        actions.append(.emit([.document(
            DocumentEvent(kind: .resolutionFailed, documentID: document.document, detail: reason, resolver: resolver),
            database: document.database)]))
    }

    // MARK: Draining

    /// Stops offering; `drainFinished` comes once every offer sent has been answered and the
    /// answers written (at once when none is outstanding). The driver bounds the wait.
    package mutating func drain() -> [Action] {
        stopping = true
        var actions: [Action] = []
        finishDrainIfIdle(&actions)
        return actions
    }

    private func finishDrainIfIdle(_ actions: inout [Action]) {
        guard stopping, tickets.isEmpty, answers.isEmpty, applying == nil else { return }
        actions.append(.drainFinished)
    }
}
