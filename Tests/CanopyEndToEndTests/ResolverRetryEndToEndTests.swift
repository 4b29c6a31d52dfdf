import CanopyAgent
import CanopyCore
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A conflict whose offer failed is offered again while its resolver stays connected: after the
/// timeout, backing off, and at once on `canopyctl reload` and SIGHUP (Tools/canopyd/README.md, *Resolvers*).
@Suite("failed resolver offers are made again, against a real agent", .serialized)
struct ResolverRetryEndToEndTests {
    /// A manual agent whose rule sends ids starting with `r` to the resolver `fixer`, with
    /// `timeout` seconds to answer an offer, started.
    static func agent(timeout: Int) throws -> AgentProcess {
        let agent = try AgentProcess(initArguments: ["--listen", "127.0.0.1:0", "--conflicts", "manual"])
        try agent.appendConfig("[rule fix]\nprefix = r\nstrategy = resolver fixer\n\n[limits]\nresolver-timeout-seconds = \(timeout)\n")
        try agent.start()
        return agent
    }

    @Test("an offer not answered in time is offered again after the timeout, then after twice it, with a new ticket; the late answer to the old one is refused")
    func timedOutOfferComesBack() throws {
        let agent = try Self.agent(timeout: 1)
        let events = try EventReader(agent)
        try importConflict(agent, "r1", ["side": .string("a")], ["side": .string("b")])
        let resolver = try RawResolverConnection(agent, name: "fixer")
        let first = try resolver.nextOffer()
        #expect(first["doc"] == .string("r1"))
        // Unanswered: it fails, and says when it comes back.
        let failed = try events.next("resolution.failed") { $0["doc"] == .string("r1") }
        #expect(failed["reason"]?.stringValue == "resolver fixer did not answer within 1 s; conflict kept, offered again in 1 s", "\(failed)")
        let failedAt = Date()
        let second = try resolver.nextOffer()
        #expect(Date().timeIntervalSince(failedAt) >= 0.9, "offered again after the backoff, not at once")
        #expect(second["doc"] == .string("r1") && second["ticket"] != first["ticket"], "\(second)")
        let late = try resolver.answer(first, ["pick": first["rev"]!])
        #expect(late["error"]?.objectValue?["code"] == .string("not_found"), "\(late)")
        // Unanswered again: the wait doubles.
        let again = try events.next("resolution.failed") { $0["doc"] == .string("r1") }
        #expect(again["reason"]?.stringValue?.hasSuffix("offered again in 2 s") == true, "\(again)")
        let third = try resolver.nextOffer()
        #expect(third["doc"] == .string("r1"))
        #expect(try resolver.answer(third, ["pick": third["rev"]!])["ok"] == .bool(true))
        #expect(try events.next("conflict.resolved") { $0["doc"] == .string("r1") }["by"] == .string("fixer"))
        #expect(try agent.client().request("status")["conflicted_count"] == .int(0))
    }

    @Test("canopyctl reload and SIGHUP offer again at once a conflict whose offer timed out or whose answer was refused")
    func reloadOffersAgain() throws {
        // A long timeout: its backoff (as long again) cannot be what brings the offers back.
        let timeout = 6.0
        let agent = try Self.agent(timeout: Int(timeout))
        let events = try EventReader(agent)
        try importConflict(agent, "r1", ["side": .string("a")], ["side": .string("b")])
        let resolver = try RawResolverConnection(agent, name: "fixer")
        #expect(try resolver.nextOffer()["doc"] == .string("r1"))
        _ = try events.next("resolution.failed") { $0["doc"] == .string("r1") }

        var reloadedAt = Date()
        let reload = try agent.ctl(["reload"])
        #expect(reload.status == 0, "\(reload.stderr)")
        let afterReload = try resolver.nextOffer()
        #expect(afterReload["doc"] == .string("r1"))
        #expect(Date().timeIntervalSince(reloadedAt) < timeout - 2, "offered at once on reload")

        _ = try events.next("resolution.failed") { $0["doc"] == .string("r1") }
        reloadedAt = Date()
        agent.signal(SIGHUP)
        let afterSignal = try resolver.nextOffer()
        #expect(afterSignal["doc"] == .string("r1") && afterSignal["ticket"] != afterReload["ticket"])
        #expect(Date().timeIntervalSince(reloadedAt) < timeout - 2, "offered at once on SIGHUP")

        // A refused answer is not retried by itself; a reload offers it again.
        let notALeaf = JSONValue.string("1-" + String(repeating: "c", count: 32))
        let refused = try resolver.answer(afterSignal, ["pick": notALeaf])
        #expect(refused["error"]?.objectValue?["code"] == .string("invalid_argument"), "\(refused)")
        #expect(try agent.ctl(["reload"]).status == 0)
        let afterRefusal = try resolver.nextOffer()
        #expect(afterRefusal["doc"] == .string("r1"))
        #expect(try resolver.answer(afterRefusal, ["pick": afterRefusal["rev"]!])["ok"] == .bool(true))
        #expect(try events.next("conflict.resolved") { $0["doc"] == .string("r1") }["by"] == .string("fixer"))
    }
}
