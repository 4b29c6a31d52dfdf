import Foundation
import Testing

@testable import CanopyAgent

@Suite("request bytes budget")
struct RequestBytesBudgetTests {
    /// Records which owners were granted later, in order.
    final class Grants: @unchecked Sendable {
        private let lock = NSLock()
        private var names: [String] = []
        var all: [String] { lock.withLock { names } }
        func add(_ name: String) { lock.withLock { names.append(name) } }
    }

    final class Owner {}

    @Test("grants go out at once up to the maximum, then to the waiters first come first served as they are given back")
    func firstComeFirstServed() {
        let budget = RequestBytesBudget(grantsMax: 2)
        let grants = Grants()
        let owners = (0..<4).map { _ in Owner() }
        let ids = owners.map(ObjectIdentifier.init)
        #expect(budget.request(ids[0]) { grants.add("0") })
        #expect(budget.request(ids[1]) { grants.add("1") })
        #expect(!budget.request(ids[2]) { grants.add("2") })
        #expect(!budget.request(ids[3]) { grants.add("3") })
        #expect(budget.counts == (granted: 2, waiting: 2))
        budget.release(ids[1])
        #expect(grants.all == ["2"])
        budget.release(ids[0])
        #expect(grants.all == ["2", "3"])
        #expect(budget.counts == (granted: 2, waiting: 0))
    }

    @Test("a waiter that gives up is never granted, and asking twice holds one place")
    func withdrawnWaiters() {
        let budget = RequestBytesBudget(grantsMax: 1)
        let grants = Grants()
        let owners = (0..<3).map { _ in Owner() }
        let ids = owners.map(ObjectIdentifier.init)
        #expect(budget.request(ids[0]) { grants.add("0") })
        #expect(budget.request(ids[0]) { grants.add("0 again") })
        #expect(!budget.request(ids[1]) { grants.add("1") })
        #expect(!budget.request(ids[1]) { grants.add("1 again") })
        #expect(!budget.request(ids[2]) { grants.add("2") })
        budget.release(ids[1])
        #expect(budget.counts == (granted: 1, waiting: 1))
        budget.release(ids[0])
        #expect(grants.all == ["2"])
    }
}
