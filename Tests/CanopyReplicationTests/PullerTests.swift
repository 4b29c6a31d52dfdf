import CanopyCore
import CanopyStore
import CanopyWire
import Testing
@testable import CanopyReplication

/// This node's pull on one connection (§6.2–6.8, target side): begin → checkpointGet →
/// checkpoint → subscribe → changes/revisions/acks, driven with wire messages over a store in
/// memory, the writes run in the test.
@Suite("Puller")
struct PullerTests {
    let store = FakeReplicationStore()
    let sent = RecordingOutbox()
    let peerDatabaseID = [UInt8](repeating: 0xB2, count: 16)

    var replicationID: [UInt8] {
        ReplicationIdentity.replicationID(source: peerDatabaseID, target: store.databaseIDBytes, filter: .all)
    }

    var checkpointID: String { ReplicationIdentity.checkpointDocumentID(replicationID) }

    func puller(continuous: Bool = false, pullFilter: ReplicationFilter = .all) -> Puller {
        Puller(store: store, configuration: ReplicationConfiguration(direction: .both, continuous: continuous, pullFilter: pullFilter))
    }

    /// Begins a pass and answers its checkpointGet with no copy: the puller is subscribed from 0.
    func subscribed(continuous: Bool = false) throws -> Puller {
        var puller = puller(continuous: continuous)
        try puller.begin(peerDatabaseID: peerDatabaseID, namesRefusals: true, sent.outbox)
        _ = try puller.receive(Checkpoint(requestID: 1, value: nil), session: "a1b2c3", sent.outbox)
        _ = sent.take()
        store.clearCalls()
        return puller
    }

    /// Hands the puller the checked revisions of one final message and runs the write it gives.
    func writeRevisions(_ puller: inout Puller, requestID: RequestID, _ revisions: [ReceivedRevision]) throws -> SubscriptionTarget.Completion? {
        let foreign = try puller.foreignRevisions(requestID: requestID, revisions: revisions).revisions
        puller.checked([.init(requestID: requestID, final: true, result: .success(try DocumentStore.checkForeign(foreign)))])
        return try writeNext(&puller)
    }

    /// Runs the puller's next write, if any, and reports it written.
    func writeNext(_ puller: inout Puller) throws -> SubscriptionTarget.Completion? {
        let target = try #require(puller.target)
        guard let write = try puller.nextWrite() else { return nil }
        let events = try write.perform().get()
        return puller.written(write, events: events, writtenFor: ObjectIdentifier(target), sent.outbox)
    }

    @Test("begin reads the local checkpoint and asks for the peer's copy; the answer subscribes from the newest sequence both agree on")
    func beginThenSubscribe() throws {
        store.setLocal(checkpointID, ReplicationCheckpoint(current: .init(session: "s1", sequence: 40)).json)
        var puller = puller()
        try puller.begin(peerDatabaseID: peerDatabaseID, namesRefusals: true, sent.outbox)
        #expect(store.calls == [.localGet(checkpointID)])
        #expect(sent.take() == [.checkpointGet(CheckpointGet(requestID: 1, replicationID: replicationID))])
        #expect(puller.state.awaitingCheckpoint && puller.target == nil)

        let remote = ReplicationCheckpoint(current: .init(session: "s1", sequence: 30))
        let since = try puller.receive(Checkpoint(requestID: 1, value: remote.encoded()), session: "s2", sent.outbox)
        #expect(since == 30)
        #expect(sent.take() == [.subscribe(Subscribe(requestID: 2, replicationID: replicationID, since: 30, continuous: false, filter: .none))])
        #expect(puller.target?.subscriptionID == 2 && puller.target?.lastSequence == 30)
        #expect(!puller.state.subscriptionEnded && !puller.canStartAnotherPass)
    }

    @Test("without a checkpoint on both sides the pull starts from 0; a pull filter travels in subscribe and names its own replication")
    func filterAndFullReplication() throws {
        var puller = puller(continuous: true, pullFilter: .documentIDs(["b", "a"]))
        try puller.begin(peerDatabaseID: peerDatabaseID, namesRefusals: false, sent.outbox)
        let filteredID = ReplicationIdentity.replicationID(
            source: peerDatabaseID, target: store.databaseIDBytes, filter: .documentIDs(["a", "b"]))
        #expect(filteredID != replicationID)
        #expect(sent.take() == [.checkpointGet(CheckpointGet(requestID: 1, replicationID: filteredID))])
        let since = try puller.receive(Checkpoint(requestID: 1, value: nil), session: "s1", sent.outbox)
        #expect(since == 0)
        #expect(sent.take() == [.subscribe(Subscribe(requestID: 2, replicationID: filteredID, since: 0, continuous: true, filter: .docIDs(["a", "b"])))])
    }

    @Test("a checkpoint that answers no checkpointGet of ours is a violation; so are changes and revisions before the subscription")
    func refusalsBeforeSubscribing() throws {
        var puller = puller()
        let early = thrown { try puller.receive(Checkpoint(requestID: 1, value: nil), session: "s", sent.outbox) }
        #expect(early?.invalidReference == "checkpoint answers no request of ours")
        let changes = Changes(requestID: 1, subscriptionID: 2, caughtUp: true, entries: [])
        #expect(thrown { try puller.receive(changes, sent.outbox) }?.invalidReference == "changes without a subscription")

        try puller.begin(peerDatabaseID: peerDatabaseID, namesRefusals: true, sent.outbox)
        let wrong = thrown { try puller.receive(Checkpoint(requestID: 7, value: nil), session: "s", sent.outbox) }
        #expect(wrong?.invalidReference == "checkpoint answers no request of ours")
        #expect(thrown { try puller.receive(changes, sent.outbox) }?.invalidReference == "changes without a subscription")
        #expect(thrown { try puller.foreignRevisions(requestID: 1, revisions: []) }?.invalidReference == "revisions without a subscription")
        #expect(try puller.nextWrite() == nil)
        #expect(sent.take() == [.checkpointGet(CheckpointGet(requestID: 1, replicationID: replicationID))], "a violation sends nothing")
        #expect(puller.state.awaitingCheckpoint)
    }

    @Test("a store failure reading the local checkpoint sends nothing and leaves the pull idle")
    func beginStoreFailure() {
        store.fail(.localGet)
        var puller = puller()
        #expect(thrown { try puller.begin(peerDatabaseID: peerDatabaseID, namesRefusals: true, sent.outbox) }?.isStoreFailure == true)
        #expect(sent.take().isEmpty && puller.canStartAnotherPass && !puller.state.awaitingCheckpoint)
    }

    @Test("one-shot: the caughtUp batch ends the subscription; its write is acknowledged, checkpointed and copied to the peer, and another pass may start")
    func oneShotPass() throws {
        var puller = try subscribed()
        let wanted = SampleRevision("wanted")
        try puller.receive(Changes(requestID: 1, subscriptionID: 2, caughtUp: true, entries: [wanted.entry(sequence: 1)]), sent.outbox)
        #expect(sent.take() == [.changesReply(ChangesReply(requestID: 1, items: [ChangesReplyItem(missing: [0])]))])
        #expect(puller.state.subscriptionEnded && puller.hasBatchesInFlight && !puller.canStartAnotherPass)

        let completion = try #require(try writeRevisions(&puller, requestID: 1, [wanted.received(sequence: 1)]))
        #expect(completion.caughtUp && completion.checkpoint == 1)
        let checkpoint = ReplicationCheckpoint(current: .init(session: "a1b2c3", sequence: 1))
        #expect(sent.take() == [
            .revisionsAck(RevisionsAck(requestID: 1, status: .ok)),
            .checkpointSet(CheckpointSet(requestID: 3, replicationID: replicationID, value: checkpoint.encoded())),
        ])
        #expect(puller.caughtUpOnce && !puller.checkpointCopySettled && puller.canStartAnotherPass)
        puller.checkpointCopyAcknowledged(sent.outbox)
        #expect(sent.take().isEmpty && puller.checkpointCopySettled)

        // The next pass reads the checkpoint the write recorded.
        puller.resetForAnotherPass()
        #expect(!puller.caughtUpOnce && puller.target == nil)
        store.clearCalls()
        try puller.begin(peerDatabaseID: peerDatabaseID, namesRefusals: true, sent.outbox)
        #expect(store.calls == [.localGet(checkpointID)])
        #expect(sent.take() == [.checkpointGet(CheckpointGet(requestID: 4, replicationID: replicationID))])
        let since = try puller.receive(Checkpoint(requestID: 4, value: checkpoint.encoded()), session: "d4e5f6", sent.outbox)
        #expect(since == 1)
    }

    @Test("one write at a time: a second checked message waits until the first write is reported written or abandoned")
    func oneWriteInFlight() throws {
        var puller = try subscribed(continuous: true)
        let first = SampleRevision("first"), second = SampleRevision("second")
        try puller.receive(Changes(requestID: 1, subscriptionID: 2, caughtUp: false, entries: [first.entry(sequence: 1)]), sent.outbox)
        try puller.receive(Changes(requestID: 2, subscriptionID: 2, caughtUp: false, entries: [second.entry(sequence: 2)]), sent.outbox)
        let check = { (requestID: RequestID, sample: SampleRevision) throws -> RevisionCheckPipeline.Checked in
            .init(requestID: requestID, final: true, result: .success(try DocumentStore.checkForeign([sample.foreign])))
        }
        puller.checked([try check(1, first)])
        let inFlight = try #require(try puller.nextWrite())
        puller.checked([try check(2, second)])
        #expect(try puller.nextWrite() == nil)
        puller.writeAbandoned()
        let next = try #require(try puller.nextWrite())
        #expect(next.messages.map(\.requestID) == [2])
        #expect(inFlight.messages.map(\.requestID) == [1])
    }

    @Test("a continuous subscription stays open after caughtUp; stopping it sends unsubscribe once")
    func continuousThenStop() throws {
        var puller = try subscribed(continuous: true)
        try puller.receive(Changes(requestID: 1, subscriptionID: 2, caughtUp: true, entries: []), sent.outbox)
        #expect(!puller.state.subscriptionEnded)
        _ = sent.take()
        puller.stopSubscription(sent.outbox)
        puller.stopSubscription(sent.outbox)
        #expect(sent.take() == [.unsubscribe(Unsubscribe(subscriptionID: 2))])
        #expect(puller.state.subscriptionEnded)
    }

    @Test("a write reported for a target since replaced sends nothing and reports nothing")
    func writeForReplacedTarget() throws {
        var puller = try subscribed()
        let wanted = SampleRevision("wanted")
        try puller.receive(Changes(requestID: 1, subscriptionID: 2, caughtUp: true, entries: [wanted.entry(sequence: 1)]), sent.outbox)
        _ = sent.take()
        let foreign = try puller.foreignRevisions(requestID: 1, revisions: [wanted.received(sequence: 1)]).revisions
        puller.checked([.init(requestID: 1, final: true, result: .success(try DocumentStore.checkForeign(foreign)))])
        let write = try #require(try puller.nextWrite())
        let events = try write.perform().get()
        #expect(puller.written(write, events: events, writtenFor: ObjectIdentifier(store), sent.outbox) == nil)
        #expect(sent.take().isEmpty)
        #expect(try puller.nextWrite() == nil, "the write is no longer in flight, and nothing else is queued")
    }

    @Test("a message whose check failed as a whole is a protocol violation when its turn to be written comes")
    func failedCheck() throws {
        var puller = try subscribed()
        let wanted = SampleRevision("wanted")
        try puller.receive(Changes(requestID: 1, subscriptionID: 2, caughtUp: false, entries: [wanted.entry(sequence: 1)]), sent.outbox)
        puller.checked([.init(requestID: 1, final: true, result: .failure(.batchTooLarge(count: 5000, limit: 4096)))])
        guard case .protocolViolation(.invalidDocument) = thrown({ try puller.nextWrite() }) else {
            Issue.record("a failed check must close the connection as invalidDocument")
            return
        }
    }

    @Test("the peer refusing our subscription ends the pull with its reason; an error naming another request does not")
    func subscriptionRefused() throws {
        var puller = try subscribed()
        #expect(puller.receive(ErrorMessage(requestID: 77, code: .busy, message: "later")) == nil)
        #expect(puller.target != nil)
        let reason = puller.receive(ErrorMessage(requestID: 2, code: .forbidden, message: "this node does not push to you"))
        #expect(reason == "\(ErrorCode.forbidden): this node does not push to you")
        #expect(puller.state.isRefused && !puller.canStartAnotherPass && puller.target == nil)
    }

    @Test("checkpoint copies go one at a time: a batch completed meanwhile is copied after the ack; a refused copy is forgotten")
    func checkpointCopies() throws {
        var puller = try subscribed(continuous: true)
        let samples = ["a", "b", "c"].map { SampleRevision($0) }
        for (index, sample) in samples.enumerated() {
            let requestID = RequestID(index + 1)
            try puller.receive(Changes(requestID: requestID, subscriptionID: 2, caughtUp: false, entries: [sample.entry(sequence: requestID)]), sent.outbox)
        }
        _ = sent.take()
        _ = try writeRevisions(&puller, requestID: 1, [samples[0].received(sequence: 1)])
        let firstCopy = try #require(sent.take().compactMap(\.checkpointSet).first)
        _ = try writeRevisions(&puller, requestID: 2, [samples[1].received(sequence: 2)])
        #expect(sent.take() == [.revisionsAck(RevisionsAck(requestID: 2, status: .ok))], "a copy is in flight: the next one waits")

        puller.checkpointCopyAcknowledged(sent.outbox)
        let newest = ReplicationCheckpoint(current: .init(session: "a1b2c3", sequence: 2))
        let secondCopy = try #require(sent.take().compactMap(\.checkpointSet).first)
        #expect(secondCopy.value == newest.encoded() && secondCopy.requestID != firstCopy.requestID)

        #expect(puller.receive(ErrorMessage(requestID: secondCopy.requestID, code: .storageFailure, message: "disk full")) == nil)
        #expect(puller.checkpointCopySettled && puller.target != nil)
        _ = try writeRevisions(&puller, requestID: 3, [samples[2].received(sequence: 3)])
        #expect(sent.take().compactMap(\.checkpointSet).map(\.value) == [ReplicationCheckpoint(current: .init(session: "a1b2c3", sequence: 3)).encoded()])
    }
}
