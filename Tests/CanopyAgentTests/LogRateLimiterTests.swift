import Testing

@testable import CanopyAgent

@Suite("log rate limiter")
struct LogRateLimiterTests {
    @Test("the first line of a kind goes out, the rest within the interval are held back and counted on the next line")
    func oneLinePerKindPerInterval() {
        var limiter = LogRateLimiter(intervalSeconds: 10)
        #expect(limiter.admit("peer.handshake.failed", now: 100) == .log(suppressed: 0))
        for step in 1...299 {
            #expect(limiter.admit("peer.handshake.failed", now: 100 + Double(step) / 100) == .suppress)
        }
        #expect(limiter.admit("peer.handshake.failed", now: 109.99) == .suppress)
        #expect(limiter.admit("peer.handshake.failed", now: 110) == .log(suppressed: 300))
        #expect(limiter.admit("peer.handshake.failed", now: 125) == .log(suppressed: 0))
    }

    @Test("kinds are limited separately")
    func kindsAreIndependent() {
        var limiter = LogRateLimiter(intervalSeconds: 10)
        #expect(limiter.admit("admin.refused.busy", now: 0) == .log(suppressed: 0))
        #expect(limiter.admit("admin.line_too_long", now: 1) == .log(suppressed: 0))
        #expect(limiter.admit("admin.refused.busy", now: 2) == .suppress)
        #expect(limiter.admit("admin.line_too_long", now: 3) == .suppress)
    }

    @Test("a flood of distinct kinds keeps at most kindsMax of them, forgetting the oldest")
    func distinctKindsAreBounded() {
        var limiter = LogRateLimiter(intervalSeconds: 10, kindsMax: 4)
        for index in 0..<1000 { _ = limiter.admit("rejected:\(index)", now: Double(index) / 1000) }
        // The newest four are still held: a repeat within the interval is suppressed.
        #expect(limiter.admit("rejected:999", now: 1) == .suppress)
        // The oldest was forgotten, so it counts as new.
        #expect(limiter.admit("rejected:0", now: 1) == .log(suppressed: 0))
        #expect(limiter.drain().map(\.kind) == ["rejected:999"])
    }

    @Test("drain reports every kind with lines held back, once, oldest first")
    func drainReportsHeldBackCounts() {
        var limiter = LogRateLimiter(intervalSeconds: 10)
        _ = limiter.admit("b", now: 0)
        _ = limiter.admit("a", now: 1)
        _ = limiter.admit("quiet", now: 2)
        for _ in 0..<5 { _ = limiter.admit("a", now: 3) }
        for _ in 0..<2 { _ = limiter.admit("b", now: 3) }
        let held = limiter.drain()
        #expect(held.map(\.kind) == ["b", "a"])
        #expect(held.map(\.suppressed) == [2, 5])
        #expect(limiter.drain().isEmpty)
        // Counts start again after a drain: the next line says nothing was held back since.
        #expect(limiter.admit("a", now: 20) == .log(suppressed: 0))
    }
}
