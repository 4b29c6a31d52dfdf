import CanopyCore
import CanopyStore
import CanopyWire
import Testing
@testable import CanopyReplication

/// This node as the source on one connection (§6.2–6.7, push side): the peer's subscriptions,
/// the window of batches in flight, acks and unsubscribe. Driven with wire messages over a store
/// in memory.
@Suite("Pusher")
struct PusherTests {
    let store = FakeReplicationStore()
    let sent = RecordingOutbox()

    func pusher(direction: ReplicationDirection = .both, batchSize: Int = 1, window: Int = 8) -> Pusher {
        Pusher(store: store, configuration: ReplicationConfiguration(direction: direction, batchSize: batchSize, window: window))
    }

    func subscribe(_ id: RequestID = 100, continuous: Bool = true) -> Subscribe {
        Subscribe(requestID: id, replicationID: [4, 2], since: 0, continuous: continuous, filter: .none)
    }

    /// Appends one sample document a sequence for each id, from sequence 1, each readable to send.
    func feed(_ ids: [String], from first: Int64 = 1) -> [SampleRevision] {
        let samples = ids.map { SampleRevision($0) }
        for (index, sample) in samples.enumerated() {
            store.appendChange(sample.documentID, [sample.leaf], sequence: first + Int64(index))
            store.supply(sample.foreign)
        }
        return samples
    }

    func sentBatches() -> [Changes] { sent.take().compactMap(\.changes) }

    func nothingMissing(_ changes: Changes) -> ChangesReply {
        ChangesReply(requestID: changes.requestID, items: changes.entries.map { _ in .complete })
    }

    @Test("a node that does not push answers subscribe with forbidden and keeps no subscription")
    func forbidden() throws {
        _ = feed(["a"])
        var pusher = pusher(direction: .pull)
        pusher.peerSaidHello(subscribes: true)
        #expect(!pusher.awaitingSubscription)
        let report = try pusher.subscribe(subscribe(), peerWindow: 8, marksImportedIDs: true, pumping: true, sent.outbox)
        #expect(report.documents.isEmpty && !report.completed)
        #expect(sent.take() == [.error(ErrorMessage(requestID: 100, code: .forbidden, message: "this node does not push to you"))])
        #expect(pusher.acknowledgedSequence == nil && !pusher.hasBatchesInFlight)
        #expect(store.calls.isEmpty)
    }

    @Test("a pushing node awaits the subscription the peer's hello announced, until it arrives")
    func awaitsAnnouncedSubscription() throws {
        var pusher = pusher()
        pusher.peerSaidHello(subscribes: false)
        #expect(!pusher.awaitingSubscription)
        pusher.peerSaidHello(subscribes: true)
        #expect(pusher.awaitingSubscription)
        _ = try pusher.subscribe(subscribe(), peerWindow: 8, marksImportedIDs: true, pumping: true, sent.outbox)
        #expect(!pusher.awaitingSubscription)
    }

    @Test("at most the smaller of our window and the peer's batches are in flight; a reply with nothing missing frees one")
    func windowFromBothSides() throws {
        let samples = feed(["a", "b", "c", "d"])
        var pusher = pusher(window: 3)
        _ = try pusher.subscribe(subscribe(), peerWindow: 2, marksImportedIDs: true, pumping: true, sent.outbox)
        let batches = sentBatches()
        #expect(batches.map { $0.entries.map(\.docID) } == [["a"], ["b"]])
        #expect(batches.allSatisfy { $0.subscriptionID == 100 })
        #expect(pusher.hasBatchesInFlight && !pusher.isDrained)

        _ = try pusher.receive(nothingMissing(batches[0]), pumping: true, sent.outbox)
        #expect(sentBatches() == [Changes(requestID: 3, subscriptionID: 100, caughtUp: false, entries: [samples[2].entry(sequence: 3)])])
        #expect(pusher.acknowledgedSequence == 1)
        #expect(pusher.progress == ReplicationProgress(completed: 1, total: 3))
    }

    @Test("a batch that asked for revisions holds its place in the window until its ack, which reports the pushed documents")
    func ackFreesWindow() throws {
        let samples = feed(["a", "b"])
        var pusher = pusher(window: 1)
        _ = try pusher.subscribe(subscribe(), peerWindow: 8, marksImportedIDs: true, pumping: true, sent.outbox)
        let first = try #require(sentBatches().first)
        _ = try pusher.receive(ChangesReply(requestID: first.requestID, items: [ChangesReplyItem(missing: [0])]), pumping: true, sent.outbox)
        #expect(sent.take() == [.revisions(Revisions(requestID: first.requestID, final: true, revisions: [samples[0].transfer]))])
        #expect(!pusher.pushedAnything)

        let report = try pusher.receive(RevisionsAck(requestID: first.requestID, status: .ok), pumping: true, sent.outbox)
        #expect(report.documents == [DocumentEvent(kind: .pushed, documentID: "a", revision: samples[0].id)])
        #expect(pusher.pushedAnything && pusher.acknowledgedSequence == 1)
        // A full page does not show the feed's end: caughtUp comes with the next, empty page.
        #expect(sentBatches() == [Changes(requestID: 2, subscriptionID: 100, caughtUp: false, entries: [samples[1].entry(sequence: 2)])])
    }

    @Test("a one-shot subscription served completely is reported once and retired; what the peer acknowledged stays")
    func oneShotRetires() throws {
        _ = feed(["a"])
        var pusher = pusher(batchSize: 10)
        _ = try pusher.subscribe(subscribe(continuous: false), peerWindow: 8, marksImportedIDs: true, pumping: true, sent.outbox)
        let batch = try #require(sentBatches().first)
        #expect(batch.caughtUp)
        let report = try pusher.receive(nothingMissing(batch), pumping: true, sent.outbox)
        #expect(report.completed)
        #expect(pusher.acknowledgedSequence == 1 && pusher.isDrained && !pusher.hasBatchesInFlight)
        let late = thrown { try pusher.receive(nothingMissing(batch), pumping: true, sent.outbox) }
        #expect(late?.invalidReference == "changesReply for unknown request \(batch.requestID)")
        // The same id may subscribe again once the first is retired.
        _ = try pusher.subscribe(subscribe(continuous: false), peerWindow: 8, marksImportedIDs: true, pumping: true, sent.outbox)
        #expect(sentBatches().count == 1)
    }

    @Test("unsubscribe stops new batches; the batch in flight still completes, and an unknown subscription is ignored")
    func unsubscribeStops() throws {
        _ = feed(["a", "b"])
        var pusher = pusher(window: 1)
        _ = try pusher.subscribe(subscribe(), peerWindow: 8, marksImportedIDs: true, pumping: true, sent.outbox)
        let batch = try #require(sentBatches().first)
        let stopped = try pusher.unsubscribe(Unsubscribe(subscriptionID: 100), pumping: true, sent.outbox)
        #expect(!stopped.completed && pusher.hasBatchesInFlight)
        let report = try pusher.receive(nothingMissing(batch), pumping: true, sent.outbox)
        #expect(sentBatches().isEmpty, "no batch after unsubscribe, though the feed has more")
        #expect(report.completed && !pusher.hasBatchesInFlight && pusher.acknowledgedSequence == 1)
        #expect(try pusher.unsubscribe(Unsubscribe(subscriptionID: 55), pumping: true, sent.outbox).completed == false)
    }

    @Test("while draining nothing is sent, not even a new subscription's first batch")
    func drainingSendsNothing() throws {
        _ = feed(["a"])
        var pusher = pusher()
        pusher.peerSaidHello(subscribes: true)
        let report = try pusher.subscribe(subscribe(), peerWindow: 8, marksImportedIDs: true, pumping: false, sent.outbox)
        #expect(!report.completed && sent.take().isEmpty && store.calls.isEmpty)
        #expect(!pusher.awaitingSubscription && !pusher.isDrained, "the subscription exists and the feed is unread")
    }

    @Test("a duplicate subscription id and subscriptions beyond the limit are violations")
    func subscriptionLimits() throws {
        var pusher = pusher()
        _ = try pusher.subscribe(subscribe(1), peerWindow: 8, marksImportedIDs: true, pumping: true, sent.outbox)
        let duplicate = thrown { try pusher.subscribe(subscribe(1), peerWindow: 8, marksImportedIDs: true, pumping: true, sent.outbox) }
        #expect(duplicate?.invalidReference == "subscription 1 is a duplicate or over the limit")
        for id in 2...RequestID(WireLimits.subscriptionsMax) {
            _ = try pusher.subscribe(subscribe(id), peerWindow: 8, marksImportedIDs: true, pumping: true, sent.outbox)
        }
        let over = RequestID(WireLimits.subscriptionsMax + 1)
        let tooMany = thrown { try pusher.subscribe(subscribe(over), peerWindow: 8, marksImportedIDs: true, pumping: true, sent.outbox) }
        #expect(tooMany?.invalidReference == "subscription \(over) is a duplicate or over the limit")
    }

    @Test("new commits go out on every continuous subscription, in subscription id order")
    func commitsReachContinuousSubscriptions() throws {
        _ = feed(["a"])
        var pusher = pusher(batchSize: 10)
        for id: RequestID in [102, 101] {
            _ = try pusher.subscribe(subscribe(id), peerWindow: 8, marksImportedIDs: true, pumping: true, sent.outbox)
        }
        for batch in sentBatches() { _ = try pusher.receive(nothingMissing(batch), pumping: true, sent.outbox) }
        #expect(pusher.isDrained)

        let later = feed(["b"], from: 2)
        #expect(!pusher.isDrained, "a commit whose notification is on its way counts as work")
        let report = try pusher.localChangesCommitted(pumping: true, sent.outbox)
        #expect(!report.completed)
        let batches = sentBatches()
        #expect(batches.map(\.subscriptionID) == [101, 102])
        #expect(batches.allSatisfy { $0.entries == [later[0].entry(sequence: 2)] && $0.caughtUp })
        #expect(pusher.progress == ReplicationProgress(completed: 2, total: 4))
    }

    @Test("acks and replies for requests no subscription owns are violations; a failing feed is an operating error")
    func unknownRequestsAndStoreFailure() throws {
        var pusher = pusher()
        let reply = thrown { try pusher.receive(ChangesReply(requestID: 9, items: []), pumping: true, sent.outbox) }
        #expect(reply?.invalidReference == "changesReply for unknown request 9")
        let ack = thrown { try pusher.receive(RevisionsAck(requestID: 9, status: .ok), pumping: true, sent.outbox) }
        #expect(ack?.invalidReference == "revisionsAck for unknown request 9")
        #expect(!pusher.pushedAnything)

        store.fail(.changesPage)
        let failure = thrown { try pusher.subscribe(subscribe(), peerWindow: 8, marksImportedIDs: true, pumping: true, sent.outbox) }
        #expect(failure?.isStoreFailure == true)
        #expect(sent.take().isEmpty)
    }
}
