import CanopyCore
import CanopyStore
import Testing
@testable import CanopyReplication

/// Offering again the conflicts whose offers failed: after a timeout with backoff, and at once on
/// a reload (`Protocol/admin-v1.md` §5, *Resolvers*).
@Suite("Resolver offers made again")
struct ResolverOffersRetryTests {
    typealias Offers = ResolverOffersTests.Offers
    typealias Support = ResolverOffersTests

    /// The reason of each `resolution.failed` in `actions`.
    static func reasons(_ actions: [Offers.Action]) -> [String] {
        actions.flatMap { action -> [String] in
            guard case .emit(let events) = action else { return [] }
            return events.compactMap { event in
                if case .document(let document, _) = event, document.kind == .resolutionFailed { return document.detail }
                return nil
            }
        }
    }

    /// The seconds of each `scheduleRetry` in `actions`.
    static func retries(_ actions: [Offers.Action]) -> [Int] {
        actions.compactMap { action in
            if case .scheduleRetry(_, let seconds) = action { return seconds }
            return nil
        }
    }

    @Test("a conflict whose offers keep timing out is offered again after the timeout, doubled each time, at most the maximum")
    func backoffAfterTimeouts() throws {
        var offers = Support.machine()
        _ = try Support.register(&offers)
        var ticket = Support.tickets(Support.readAll(&offers, offers.observe([Support.arrived("res-1")], peer: nil))).first!
        var waits: [Int] = []
        for _ in 0..<7 {
            let fired = offers.timeoutFired(ticket: ticket)
            waits += Self.retries(fired)
            #expect(Self.reasons(fired).first?.hasSuffix("did not answer within 10 s; conflict kept, offered again in \(waits.last!) s") == true)
            #expect(Support.readAll(&offers, offers.observe([Support.foundByScan("res-1")], peer: nil)).isEmpty, "a scan waits for the retry")
            let due = offers.retryDue(ticket: ticket)
            #expect(due == [.readConflicts(resolver: "sim", documents: [Support.key("res-1")])])
            #expect(offers.retryDue(ticket: ticket).isEmpty, "a retry comes once")
            let next = Support.tickets(Support.readAll(&offers, due))
            #expect(next.count == 1 && next[0] > ticket)
            ticket = next[0]
        }
        #expect(waits == [10, 20, 40, 80, 160, 300, 300])
        // An answer settles it; a retry still scheduled for it does nothing.
        _ = offers.answerReceived(ticket: ticket, decision: .keep(Support.revision(2, 2)))
        _ = offers.answersApplied([.success(Support.revision(3, 1))])
        #expect(offers.waitingDocuments(in: .default).isEmpty)
    }

    @Test("a retry that no longer applies does nothing: the document changed, its resolver registered again, or the machine drains")
    func staleRetries() throws {
        var offers = Support.machine()
        _ = try Support.register(&offers)
        _ = Support.readAll(&offers, offers.observe([Support.arrived("res-1"), Support.arrived("res-2")], peer: nil))
        _ = offers.timeoutFired(ticket: 1)
        _ = offers.timeoutFired(ticket: 2)
        // res-1 changes: offered at once (ticket 3), with a fresh backoff.
        #expect(Support.tickets(Support.readAll(&offers, offers.observe([Support.arrived("res-1")], peer: nil))) == [3])
        #expect(offers.retryDue(ticket: 1).isEmpty)
        #expect(Self.retries(offers.timeoutFired(ticket: 3)) == [10])
        // The resolver goes and comes back: both are offered on registration; the old retries void.
        _ = offers.disconnected(1)
        #expect(Support.tickets(Support.readAll(&offers, try Support.register(&offers, connection: 2))) == [4, 5])
        #expect(offers.retryDue(ticket: 2).isEmpty && offers.retryDue(ticket: 3).isEmpty)
        // Draining: a timeout schedules no retry, and says none comes.
        _ = offers.drain()
        let fired = offers.timeoutFired(ticket: 4)
        #expect(Self.retries(fired).isEmpty)
        #expect(Self.reasons(fired).first?.hasSuffix("did not answer within 10 s; conflict kept") == true)
    }

    @Test("a refused answer schedules no retry; a reload offers every failed conflict of a connected resolver again at once, backoff reset")
    func reloadOffersFailedConflicts() throws {
        var offers = Support.machine()
        _ = try Support.register(&offers)
        _ = Support.readAll(&offers, offers.observe(["res-1", "res-2", "res-3"].map { Support.arrived($0) }, peer: nil))
        // res-1 times out twice in a row (its backoff is 20 s by now), res-2's answer is refused.
        _ = offers.timeoutFired(ticket: 1)
        let retried = Support.tickets(Support.readAll(&offers, offers.retryDue(ticket: 1)))
        #expect(Self.retries(offers.timeoutFired(ticket: retried[0])) == [20])
        _ = offers.answerReceived(ticket: 2, decision: .keep(Support.revision(1, 9)))
        let refused = offers.answersApplied([.failure(Offers.Refusal(code: "invalid_argument", message: "not a leaf"))])
        #expect(Self.retries(refused).isEmpty && Support.failures(refused) == ["res-2"])
        // res-3 is still outstanding: the reload leaves its offer standing.
        let reloaded = offers.reloaded()
        #expect(reloaded.suffix(2) == [.policyChanged, .scan])
        #expect(Support.tickets(Support.readAll(&offers, reloaded)) == [5, 6])
        #expect(offers.document(offeredAs: 5, to: "sim") == Support.key("res-1"))
        #expect(offers.document(offeredAs: 6, to: "sim") == Support.key("res-2"))
        #expect(offers.document(offeredAs: 3, to: "sim") == Support.key("res-3"))
        // The backoff started over, and the retry scheduled before the reload is void.
        #expect(Self.retries(offers.timeoutFired(ticket: 5)) == [10])
        #expect(offers.retryDue(ticket: retried[0]).isEmpty)
        // With no resolver connected, a reload offers nothing; registering does.
        _ = offers.disconnected(1)
        #expect(offers.reloaded() == [.policyChanged, .scan])
    }
}
