import CanopyCore
import CanopyStore
import CanopyWire
import Testing
@testable import CanopyReplication

/// Where the pull stands on one connection, and when another pass may start.
@Suite("Pull state")
struct PullStateTests {
    let store = FakeReplicationStore()

    func target() -> SubscriptionTarget {
        SubscriptionTarget(
            subscriptionID: 2, replicationID: [9], filter: .all, store: store, session: "s", since: 0, localCheckpoint: nil)
    }

    @Test("idle may start a pass; waiting for a checkpoint or a refused pull may not")
    func idleAwaitingRefused() {
        let idle = PullState.idle
        #expect(idle.canStartAnotherPass && idle.target == nil && !idle.awaitingCheckpoint && !idle.isRefused && !idle.subscriptionEnded)
        let awaiting = PullState.awaitingCheckpoint(requestID: 1, replicationID: [9], local: nil)
        #expect(!awaiting.canStartAnotherPass && awaiting.awaitingCheckpoint && awaiting.target == nil)
        let refused = PullState.refused("forbidden")
        #expect(!refused.canStartAnotherPass && refused.isRefused && refused.target == nil)
    }

    @Test("ending the subscription changes only a subscription, and keeps its target")
    func endSubscription() {
        for var other in [PullState.idle, .awaitingCheckpoint(requestID: 1, replicationID: [9], local: nil), .refused("no")] {
            other.endSubscription()
            #expect(!other.subscriptionEnded && other.target == nil)
        }
        let target = target()
        var state = PullState.subscribed(target, ended: false)
        #expect(!state.subscriptionEnded && state.target === target)
        state.endSubscription()
        #expect(state.subscriptionEnded && state.target === target)
    }

    @Test("after a subscription another pass may start only once it ended and its batches are done")
    func anotherPassAfterSubscription() throws {
        let target = target()
        let wanted = SampleRevision("wanted")
        _ = try target.receive(Changes(requestID: 1, subscriptionID: 2, caughtUp: true, entries: [wanted.entry(sequence: 1)]))
        var state = PullState.subscribed(target, ended: false)
        #expect(!state.canStartAnotherPass, "the subscription is open")
        state.endSubscription()
        #expect(!state.canStartAnotherPass, "its batch is not written yet")

        let foreign = try target.foreignRevisions(requestID: 1, revisions: [wanted.received(sequence: 1)]).revisions
        let message = SubscriptionTarget.CheckedMessage(requestID: 1, final: true, batch: try DocumentStore.checkForeign(foreign))
        let write = try #require(try target.prepareWrite([message]))
        _ = target.finish(write, events: try write.perform().get())
        #expect(state.canStartAnotherPass)
    }
}
