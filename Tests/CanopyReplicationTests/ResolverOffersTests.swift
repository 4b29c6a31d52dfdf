import CanopyCore
import CanopyStore
import Testing
@testable import CanopyReplication

/// The resolver offers state machine on its own: events in, actions out, no store or clock
/// (`Protocol/admin-v1.md` §5, *Resolvers*).
@Suite("Resolver offers")
struct ResolverOffersTests {
    typealias Offers = ResolverOffers<Int>

    /// A rule sending `res-` documents to the resolver `sim`; the catch-all is automatic.
    static func machine(inFlight: Int = 4096) -> Offers {
        Offers(rules: [.default: ResolutionRules([ResolutionRule(name: "to-sim", idPrefix: "res-", strategy: .resolver("sim"))])],
               timeoutSeconds: 10, retryMaximumSeconds: 300, offersInFlightMax: inFlight, resolversMax: 64)
    }

    /// `id` in the `default` database.
    static func key(_ id: String, in database: DatabaseName = .default) -> Offers.Key { Offers.Key(database, id) }

    static func revision(_ generation: Int, _ digest: UInt64) -> RevisionID {
        RevisionID(generation: generation, digestHigh: digest, digestLow: digest)
    }

    static func conflict(_ id: String) -> Conflict {
        Conflict(documentID: id, leaves: [
            ConflictLeaf(revision: revision(2, 2), kind: .live, body: .object(["a": .int(2)])),
            ConflictLeaf(revision: revision(2, 1), kind: .live, body: .object(["a": .int(1)])),
        ], commonAncestorBody: .object(["a": .int(0)]), localRevision: nil)
    }

    /// The event a write that left `id` waiting for `sim` reports.
    static func arrived(_ id: String, previous: RevisionID? = revision(2, 1)) -> DocumentEvent {
        DocumentEvent(kind: .conflictAwaitingResolver, documentID: id, revision: revision(2, 2), detail: "sim",
                      conflict: DetectedConflict(leaves: [revision(2, 2), revision(2, 1)], rule: "to-sim", strategy: .resolver("sim"), previous: previous))
    }

    /// The event a scan that found `id` still waiting reports (no `conflict`).
    static func foundByScan(_ id: String) -> DocumentEvent {
        DocumentEvent(kind: .conflictAwaitingResolver, documentID: id, revision: revision(2, 2), detail: "sim")
    }

    /// Registers `sim` on `connection` and discards the scan it asks for.
    static func register(_ offers: inout Offers, connection: Int = 1) throws -> [Offers.Action] {
        let registered = try offers.register(name: "sim", prefix: nil, connection: connection)
        #expect(registered.prefix == nil)
        return registered.actions.filter { $0 != .scan && $0 != .policyChanged }
    }

    /// Answers every `readConflicts` in `actions` with the documents' conflicts, and the reads
    /// those answers ask for, until none is asked; returns every action after the first reads.
    static func readAll(_ offers: inout Offers, _ actions: [Offers.Action]) -> [Offers.Action] {
        var out: [Offers.Action] = []
        var pending = actions
        while !pending.isEmpty {
            var next: [Offers.Action] = []
            for case .readConflicts(let name, let documents) in pending {
                let found = Dictionary(documents.map { ($0, conflict($0.document)) }, uniquingKeysWith: { first, _ in first })
                next += offers.conflictsRead(found, asked: documents, resolver: name)
            }
            out += next
            pending = next
        }
        return out
    }

    static func tickets(_ actions: [Offers.Action]) -> [Int64] {
        actions.compactMap { action in
            if case .send(_, let offer) = action { return offer.ticket }
            return nil
        }
    }

    static func failures(_ actions: [Offers.Action]) -> [String] {
        actions.flatMap { action -> [String] in
            guard case .emit(let events) = action else { return [] }
            return events.compactMap { event in
                if case .document(let document, _) = event, document.kind == .resolutionFailed { return document.documentID }
                return nil
            }
        }
    }

    @Test("a conflict arriving for a connected resolver is read and offered at once, with the fields §5 lists and a timeout")
    func offerOnArrival() throws {
        var offers = Self.machine()
        #expect(try Self.register(&offers).isEmpty)
        let read = offers.observe([Self.arrived("res-1")], peer: "peer-a")
        #expect(read == [.readConflicts(resolver: "sim", documents: [Self.key("res-1")])])
        let sent = Self.readAll(&offers, read)
        guard case .send(let connection, let offer)? = sent.first else { Issue.record("no offer: \(sent)"); return }
        #expect(connection == 1)
        #expect(offer.ticket == 1 && offer.resolver == "sim" && offer.documentID == "res-1" && offer.database == "default")
        #expect(offer.conflict.leaves.first?.revision == Self.revision(2, 2))
        #expect(offer.conflict.localRevision == Self.revision(2, 1))
        #expect(offer.peer == "peer-a" && offer.rule == "to-sim")
        #expect(offer.conflict.commonAncestorBody == .object(["a": .int(0)]))
        #expect(offer.conflict.leaves.count == 2)
        #expect(sent.dropFirst().first == .scheduleTimeout(ticket: 1, seconds: 10))
        #expect(offers.document(offeredAs: 1, to: "sim") == Self.key("res-1"))
    }

    @Test("a conflict arriving while its resolver is away waits, and is offered when it registers")
    func offerOnRegistration() throws {
        var offers = Self.machine()
        #expect(offers.observe([Self.arrived("res-1")], peer: nil).isEmpty)
        #expect(offers.waitingDocuments(in: .default) == ["res-1"])
        let actions = try Self.register(&offers)
        #expect(actions == [.readConflicts(resolver: "sim", documents: [Self.key("res-1")])])
        #expect(Self.tickets(Self.readAll(&offers, actions)) == [1])
    }

    @Test("a document has one offer outstanding: arriving twice before the read asks once and offers once")
    func oneOfferPerDocument() throws {
        var offers = Self.machine()
        _ = try Self.register(&offers)
        let first = offers.observe([Self.arrived("res-1")], peer: nil)
        // The read is running: the second arrival queues the document, it starts no second read.
        #expect(offers.observe([Self.arrived("res-1")], peer: nil).isEmpty)
        let sent = Self.readAll(&offers, first)
        #expect(Self.tickets(sent) == [1])
        // The queued arrival finds the offer outstanding: it is not read again.
        #expect(!sent.contains { if case .readConflicts = $0 { true } else { false } })
    }

    @Test("a document that changes again voids the outstanding ticket and is offered anew")
    func changedDocumentVoidsTicket() throws {
        var offers = Self.machine()
        _ = try Self.register(&offers)
        _ = Self.readAll(&offers, offers.observe([Self.arrived("res-1")], peer: nil))
        let again = offers.observe([Self.arrived("res-1", previous: Self.revision(2, 2))], peer: "peer-b")
        #expect(again == [.cancelTimeout(ticket: 1), .readConflicts(resolver: "sim", documents: [Self.key("res-1")])])
        #expect(offers.document(offeredAs: 1, to: "sim") == nil)
        #expect(Self.tickets(Self.readAll(&offers, again)) == [2])
    }

    @Test("a scan that finds a conflict again leaves its outstanding offer standing")
    func scanKeepsOffer() throws {
        var offers = Self.machine()
        _ = try Self.register(&offers)
        _ = Self.readAll(&offers, offers.observe([Self.arrived("res-1")], peer: nil))
        #expect(offers.observe([Self.foundByScan("res-1")], peer: nil).isEmpty)
        #expect(offers.document(offeredAs: 1, to: "sim") == Self.key("res-1"))
    }

    @Test("an offer that times out fails and its retry is scheduled; a scan does not offer it again, a change does at once")
    func timeoutFails() throws {
        var offers = Self.machine()
        _ = try Self.register(&offers)
        _ = Self.readAll(&offers, offers.observe([Self.arrived("res-1")], peer: nil))
        let fired = offers.timeoutFired(ticket: 1)
        #expect(Self.failures(fired) == ["res-1"])
        #expect(fired.first == .cancelTimeout(ticket: 1))
        #expect(fired.last == .scheduleRetry(ticket: 1, seconds: 10))
        #expect(offers.document(offeredAs: 1, to: "sim") == nil)
        #expect(offers.timeoutFired(ticket: 1).isEmpty)
        #expect(offers.observe([Self.foundByScan("res-1")], peer: nil).isEmpty)
        #expect(offers.waitingDocuments(in: .default) == ["res-1"])
        let changed = offers.observe([Self.arrived("res-1")], peer: nil)
        #expect(changed == [.readConflicts(resolver: "sim", documents: [Self.key("res-1")])])
    }

    @Test("a refused answer fails the offer, replies with the refusal, and the conflict is not offered again by a scan")
    func refusedAnswerFails() throws {
        var offers = Self.machine()
        _ = try Self.register(&offers)
        _ = Self.readAll(&offers, offers.observe([Self.arrived("res-1"), Self.arrived("res-2")], peer: nil))
        let wrong = ResolutionDecision.keep(Self.revision(1, 9))
        let apply = offers.answerReceived(ticket: 1, decision: wrong)
        #expect(apply == [.cancelTimeout(ticket: 1), .apply([.init(ticket: 1, document: Self.key("res-1"), resolver: "sim", decision: wrong)])])
        let refusal = Offers.Refusal(code: "invalid_argument", message: "not a leaf")
        let applied = offers.answersApplied([.failure(refusal)])
        #expect(Self.failures(applied) == ["res-1"])
        #expect(applied.contains(.reply(ticket: 1, document: Self.key("res-1"), .failure(refusal))))
        #expect(offers.observe([Self.foundByScan("res-1")], peer: nil).isEmpty)
        // An answer whose decision could not be read fails the same way.
        #expect(Self.failures(offers.answerRefused(ticket: 2, reason: "no pick")) == ["res-2"])
        #expect(offers.document(offeredAs: 2, to: "sim") == nil)
    }

    @Test("a disconnect fails every offer it had outstanding, in ticket order, and changes the policy")
    func disconnectFails() throws {
        var offers = Self.machine()
        _ = try Self.register(&offers)
        _ = Self.readAll(&offers, offers.observe([Self.arrived("res-2"), Self.arrived("res-1")], peer: nil))
        #expect(offers.disconnected(99).isEmpty)
        let closed = offers.disconnected(1)
        #expect(Self.failures(closed) == ["res-2", "res-1"])
        #expect(closed.contains(.emit([.disconnected(name: "sim")])))
        #expect(closed.last == .policyChanged)
        #expect(offers.resolver(on: 1) == nil)
        #expect(offers.registrationRows.isEmpty)
        #expect(offers.waitingDocuments(in: .default) == ["res-1", "res-2"])
    }

    @Test("registering again offers the conflicts that failed, and the scan does not double them")
    func reRegistrationReoffers() throws {
        var offers = Self.machine()
        _ = try Self.register(&offers)
        _ = Self.readAll(&offers, offers.observe([Self.arrived("res-2"), Self.arrived("res-1")], peer: nil))
        _ = offers.disconnected(1)
        let registered = try offers.register(name: "sim", prefix: nil, connection: 2)
        #expect(registered.actions == [.readConflicts(resolver: "sim", documents: [Self.key("res-1"), Self.key("res-2")]), .policyChanged, .scan])
        let sent = Self.readAll(&offers, registered.actions)
        #expect(Self.tickets(sent) == [3, 4])
        #expect(sent.allSatisfy { if case .send(let connection, _) = $0 { connection == 2 } else { true } })
        #expect(offers.observe([Self.foundByScan("res-1"), Self.foundByScan("res-2")], peer: nil).isEmpty)
    }

    @Test("registration refuses a bad name, a name in use and a second registration on one connection")
    func registrationRefusals() throws {
        var offers = Self.machine()
        #expect(throws: Offers.Refusal.self) { try offers.register(name: "no spaces", prefix: nil, connection: 1) }
        _ = try Self.register(&offers)
        #expect(throws: Offers.Refusal.self) { try offers.register(name: "sim", prefix: nil, connection: 2) }
        #expect(throws: Offers.Refusal.self) { try offers.register(name: "other", prefix: nil, connection: 1) }
        // A resolver no rule names claims every conflict no rule covers, and joins the policy.
        let other = try offers.register(name: "other", prefix: nil, connection: 2)
        #expect(other.prefix == "")
        #expect(offers.policy(for: .default).rules.map(\.name) == ["to-sim", "other"])
    }

    @Test("at most offersInFlightMax offers are outstanding per resolver; an answer makes room for the next")
    func inFlightLimit() throws {
        var offers = Self.machine(inFlight: 2)
        _ = try Self.register(&offers)
        let read = offers.observe(["res-1", "res-2", "res-3"].map { Self.arrived($0) }, peer: nil)
        #expect(read == [.readConflicts(resolver: "sim", documents: [Self.key("res-1")])])
        let sent = Self.readAll(&offers, read)
        #expect(Self.tickets(sent) == [1, 2])
        let answered = offers.answerReceived(ticket: 1, decision: .keep(Self.revision(2, 2)))
        #expect(answered.contains(.readConflicts(resolver: "sim", documents: [Self.key("res-3")])))
        #expect(Self.tickets(Self.readAll(&offers, answered)) == [3])
    }

    @Test("answers that arrive while a batch is written form the next batch, written in one transaction")
    func answersBatched() throws {
        var offers = Self.machine()
        _ = try Self.register(&offers)
        _ = Self.readAll(&offers, offers.observe(["res-1", "res-2", "res-3"].map { Self.arrived($0) }, peer: nil))
        let keep = ResolutionDecision.keep(Self.revision(2, 2))
        #expect(offers.answerReceived(ticket: 1, decision: keep).contains { if case .apply = $0 { true } else { false } })
        #expect(offers.answerReceived(ticket: 2, decision: keep) == [.cancelTimeout(ticket: 2)])
        #expect(offers.answerReceived(ticket: 3, decision: .merged(.object([:]))) == [.cancelTimeout(ticket: 3)])
        let first = offers.answersApplied([.success(Self.revision(3, 1))])
        #expect(first.contains(.reply(ticket: 1, document: Self.key("res-1"), .success(Self.revision(3, 1)))))
        #expect(first.contains(.emit([.document(
            DocumentEvent(kind: .conflictResolved, documentID: "res-1", revision: Self.revision(3, 1), detail: "sim"), database: .default)])))
        guard case .apply(let next)? = first.last else { Issue.record("no second batch: \(first)"); return }
        #expect(next.map(\.ticket) == [2, 3])
        _ = offers.answersApplied([.success(Self.revision(3, 2)), .success(Self.revision(3, 3))])
        #expect(offers.waitingDocuments(in: .default).isEmpty)
        #expect(offers.isIdle)
    }

    @Test("draining finishes at once when idle, else once the last offer is answered and written; nothing is offered meanwhile")
    func drainFinishesWhenIdle() throws {
        var idle = Self.machine()
        #expect(idle.drain() == [.drainFinished])

        var offers = Self.machine()
        _ = try Self.register(&offers)
        _ = Self.readAll(&offers, offers.observe([Self.arrived("res-1")], peer: nil))
        #expect(offers.drain().isEmpty)
        #expect(offers.observe([Self.arrived("res-2")], peer: nil).isEmpty)
        let answered = offers.answerReceived(ticket: 1, decision: .keep(Self.revision(2, 2)))
        #expect(!answered.contains(.drainFinished))
        let applied = offers.answersApplied([.success(Self.revision(3, 1))])
        #expect(applied.last == .drainFinished)
    }

    @Test("a database's rules send its conflicts to a resolver: the offer names the database; a registration's prefix claims default's only")
    func otherDatabase() throws {
        let archive = DatabaseName(validating: "archive")!
        var offers = Offers(
            rules: [
                .default: ResolutionRules([]),
                archive: ResolutionRules([ResolutionRule(name: "old", idPrefix: "old-", strategy: .resolver("sim"))]),
            ],
            timeoutSeconds: 10, retryMaximumSeconds: 300, offersInFlightMax: 8, resolversMax: 64)
        // `sim` is named by archive's rules: it claims only what they route to it.
        #expect(try offers.register(name: "sim", prefix: nil, connection: 1).prefix == nil)
        let read = offers.observe([Self.arrived("old-1")], peer: "peer-a", database: archive)
        #expect(read == [.readConflicts(resolver: "sim", documents: [Self.key("old-1", in: archive)])])
        guard case .send(_, let offer)? = Self.readAll(&offers, read).first else { Issue.record("no offer"); return }
        #expect(offer.database == "archive" && offer.documentID == "old-1", "\(offer)")
        #expect(offers.waitingDocuments(in: archive) == ["old-1"] && offers.waitingDocuments(in: .default).isEmpty)
        // The same id settled in default leaves archive's offer standing.
        let elsewhere = DocumentEvent(kind: .conflictResolved, documentID: "old-1", revision: Self.revision(3, 1), detail: "x")
        #expect(offers.observe([elsewhere], peer: nil).isEmpty)
        #expect(offers.document(offeredAs: 1, to: "sim") == Self.key("old-1", in: archive))
        let applied = offers.answerReceived(ticket: 1, decision: .keep(Self.revision(2, 2)))
        #expect(applied.contains(.apply([.init(ticket: 1, document: Self.key("old-1", in: archive), resolver: "sim", decision: .keep(Self.revision(2, 2)))])))
        // A database deleted: its conflicts wait no more, and the offer outstanding is void.
        _ = offers.observe([Self.arrived("old-2")], peer: nil, database: archive)
        #expect(offers.waitingDocuments(in: archive) == ["old-1", "old-2"])
        let dropped = offers.forget(database: archive)
        #expect(offers.waitingDocuments(in: archive).isEmpty && offers.registrationRows.first?.waiting == 0)
        #expect(!dropped.contains { if case .readConflicts = $0 { true } else { false } })
        // A resolver registered with a prefix joins default's policy, not archive's.
        _ = try offers.register(name: "wide", prefix: "", connection: 2)
        #expect(offers.policy(for: .default).rules.map(\.name) == ["wide"])
        #expect(offers.policy(for: archive).rules.map(\.name) == ["old"])
    }

    @Test("a conflict settled elsewhere is forgotten and its ticket voided")
    func forgetVoidsTicket() throws {
        var offers = Self.machine()
        _ = try Self.register(&offers)
        _ = Self.readAll(&offers, offers.observe([Self.arrived("res-1")], peer: nil))
        let resolved = DocumentEvent(kind: .conflictResolved, documentID: "res-1", revision: Self.revision(3, 1), detail: "x")
        #expect(offers.observe([resolved], peer: nil) == [.cancelTimeout(ticket: 1)])
        #expect(offers.waitingDocuments(in: .default).isEmpty)
        #expect(offers.forget(Self.key("res-1")).isEmpty)
    }
}

/// Regressions in the resolver offers.
@Suite("Resolver offers regressions")
struct ResolverOffersRegressionTests {
    typealias Offers = ResolverOffersTests.Offers

    @Test("a refused answer to a ticket the document's change voided does not mark the new conflict failed; it is offered")
    func staleRefusalKeepsNewOffer() throws {
        var offers = ResolverOffersTests.machine()
        _ = try ResolverOffersTests.register(&offers)
        _ = ResolverOffersTests.readAll(&offers, offers.observe([ResolverOffersTests.arrived("res-1")], peer: nil))
        // The answer is being written when the document changes again.
        _ = offers.answerReceived(ticket: 1, decision: .keep(ResolverOffersTests.revision(2, 1)))
        let changed = offers.observe([ResolverOffersTests.arrived("res-1", previous: ResolverOffersTests.revision(2, 2))], peer: nil)
        #expect(changed == [.readConflicts(resolver: "sim", documents: [ResolverOffersTests.key("res-1")])])
        // The old answer no longer applies (its pick is not a leaf any more): refused, and reported.
        let refusal = Offers.Refusal(code: "invalid_argument", message: "not a leaf")
        let applied = offers.answersApplied([.failure(refusal)])
        #expect(applied.contains(.reply(ticket: 1, document: ResolverOffersTests.key("res-1"), .failure(refusal))))
        #expect(ResolverOffersTests.failures(applied) == ["res-1"])
        // The new conflict is still offered.
        #expect(ResolverOffersTests.tickets(ResolverOffersTests.readAll(&offers, changed)) == [2])
    }
}
