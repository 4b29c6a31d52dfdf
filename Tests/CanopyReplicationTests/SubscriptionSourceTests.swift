import CanopyCore
import CanopyStore
import CanopyWire
import Testing
@testable import CanopyReplication

/// One subscription's source side (§6.4–6.7), driven with wire messages over a store in memory.
@Suite("Subscription source")
struct SubscriptionSourceTests {
    let store = FakeReplicationStore()
    let sent = RecordingOutbox()

    /// A source for subscription 100 from `since`.
    func source(
        since: UInt64 = 0, continuous: Bool = false, asked: ChangesFilter = .none, serving: ReplicationFilter = .all,
        batchSize: Int = 2, window: Int = 2
    ) -> SubscriptionSource {
        let subscribe = Subscribe(requestID: 100, replicationID: [1, 2, 3], since: since, continuous: continuous, filter: asked)
        return SubscriptionSource(subscribe: subscribe, serving: serving, store: store, batchSize: batchSize, window: window)
    }

    func pump(_ source: SubscriptionSource) throws {
        try source.pump(nextRequestID: sent.outbox.nextRequestID, send: sent.outbox.send)
    }

    /// Appends one sample document a sequence for each id, from sequence 1.
    func feed(_ ids: [String]) -> [SampleRevision] {
        let samples = ids.map { SampleRevision($0) }
        for (index, sample) in samples.enumerated() { store.appendChange(sample.documentID, [sample.leaf], sequence: Int64(index + 1)) }
        return samples
    }

    func nothingMissing(_ changes: Changes) -> ChangesReply {
        ChangesReply(requestID: changes.requestID, items: changes.entries.map { _ in .complete })
    }

    @Test("the source reads the feed from the subscription's since, a page at a time, with at most window batches in flight")
    func windowAndCursor() throws {
        let samples = feed(["a", "b", "c", "d", "e"])
        let source = source(since: 0, batchSize: 2, window: 2)
        try pump(source)
        let batches = sent.take().compactMap(\.changes)
        #expect(batches == [
            Changes(requestID: 1, subscriptionID: 100, caughtUp: false, entries: [samples[0].entry(sequence: 1), samples[1].entry(sequence: 2)]),
            Changes(requestID: 2, subscriptionID: 100, caughtUp: false, entries: [samples[2].entry(sequence: 3), samples[3].entry(sequence: 4)]),
        ])
        #expect(store.calls == [.changesPage(since: 0, limit: 2), .changesPage(since: 2, limit: 2)])
        #expect(source.owns(1) && source.owns(2) && !source.owns(3))

        // The window is full: pumping reads nothing more until a batch completes.
        store.clearCalls()
        try pump(source)
        #expect(sent.take().isEmpty && store.calls.isEmpty)

        let events = try source.receive(nothingMissing(batches[0]), send: sent.outbox.send)
        #expect(events.isEmpty && source.acknowledgedSequence == 2)
        store.clearCalls()
        try pump(source)
        #expect(sent.take() == [.changes(Changes(requestID: 3, subscriptionID: 100, caughtUp: true, entries: [samples[4].entry(sequence: 5)]))])
        #expect(store.calls == [.changesPage(since: 4, limit: 2)])
        #expect(source.finishedSending)
        #expect(source.progress == ReplicationProgress(completed: 2, total: 5))
    }

    @Test("a subscription resumes after its since: rows at or below it are never read")
    func resumesAfterSince() throws {
        let samples = feed(["a", "b", "c"])
        let source = source(since: 2, batchSize: 10)
        try pump(source)
        #expect(sent.take() == [.changes(Changes(requestID: 1, subscriptionID: 100, caughtUp: true, entries: [samples[2].entry(sequence: 3)]))])
        #expect(store.calls == [.changesPage(since: 2, limit: 10)])
    }

    @Test("a page whose rows are all damaged is passed over: the cursor moves past them and no empty batch goes out")
    func pagesPastDamagedRows() throws {
        store.appendDamaged(sequence: 1)
        store.appendDamaged(sequence: 2)
        let kept = SampleRevision("kept")
        store.appendChange("kept", [kept.leaf], sequence: 3)
        let source = source(batchSize: 2, window: 4)
        try pump(source)
        #expect(sent.take() == [.changes(Changes(requestID: 1, subscriptionID: 100, caughtUp: true, entries: [kept.entry(sequence: 3)]))])
        #expect(store.calls == [.changesPage(since: 0, limit: 2), .changesPage(since: 2, limit: 2)])
    }

    @Test("damaged rows at the end of the feed still end with a caughtUp batch, and count as read")
    func damagedRowsAtTheEnd() throws {
        let samples = feed(["a"])
        store.appendDamaged(sequence: 2)
        store.appendDamaged(sequence: 3)
        let source = source(batchSize: 2, window: 4)
        try pump(source)
        let batches = sent.take().compactMap(\.changes)
        #expect(batches == [
            Changes(requestID: 1, subscriptionID: 100, caughtUp: false, entries: [samples[0].entry(sequence: 1)]),
            Changes(requestID: 2, subscriptionID: 100, caughtUp: true, entries: []),
        ])
        for batch in batches { _ = try source.receive(nothingMissing(batch), send: sent.outbox.send) }
        #expect(source.isDrained && !source.hasBatchesInFlight)
    }

    @Test("a continuous source says caughtUp once and waits; a commit counts as work until its notification makes it read again")
    func continuousWaitsForCommits() throws {
        let samples = feed(["a"])
        let source = source(continuous: true)
        try pump(source)
        let first = try #require(sent.take().first?.changes)
        #expect(first.caughtUp && first.entries == [samples[0].entry(sequence: 1)])
        _ = try source.receive(nothingMissing(first), send: sent.outbox.send)
        try pump(source)
        #expect(sent.take().isEmpty)
        #expect(source.isDrained && !source.finishedSending)

        let later = SampleRevision("b")
        store.appendChange("b", [later.leaf], sequence: 2)
        #expect(!source.isDrained)
        source.localChangesCommitted()
        try pump(source)
        #expect(sent.take() == [.changes(Changes(requestID: 2, subscriptionID: 100, caughtUp: true, entries: [later.entry(sequence: 2)]))])
    }

    @Test("revisions asked for are read in one store call and sent marked final; the ack completes the batch with pushed events")
    func sendsRevisionsAndCompletesOnAck() throws {
        let samples = feed(["a", "b"])
        for sample in samples { store.supply(sample.foreign) }
        let source = source()
        try pump(source)
        let batch = try #require(sent.take().first?.changes)
        store.clearCalls()

        let reply = ChangesReply(requestID: batch.requestID, items: [ChangesReplyItem(missing: [0]), .complete])
        #expect(try source.receive(reply, send: sent.outbox.send).isEmpty)
        #expect(sent.take() == [.revisions(Revisions(requestID: batch.requestID, final: true, revisions: [samples[0].transfer]))])
        // The request carries the change's document key, and asks for the whole history the store holds.
        let request = RevisionRequest(documentID: "a", revisions: [samples[0].id], knownAncestors: [], documentKey: 10)
        #expect(store.calls == [.revisionsToSend([request], revsLimit: WireLimits.revsLimitMax, knownAncestorReach: WireLimits.revsLimitMax)])
        #expect(source.hasBatchesInFlight && source.acknowledgedSequence == 0)

        let events = try source.receive(RevisionsAck(requestID: batch.requestID, status: .ok))
        #expect(events == [DocumentEvent(kind: .pushed, documentID: "a", revision: samples[0].id)])
        #expect(source.acknowledgedSequence == 2 && !source.owns(batch.requestID))
    }

    @Test("a revision the store can no longer supply is skipped: the batch is read again a document at a time and the next revision says how many it passed")
    func skipsWhatCannotBeSupplied() throws {
        let samples = feed(["gone", "kept"])
        store.supply(samples[1].foreign)
        let source = source()
        try pump(source)
        let batch = try #require(sent.take().first?.changes)
        store.clearCalls()
        let both = ChangesReply(requestID: batch.requestID, items: [ChangesReplyItem(missing: [0]), ChangesReplyItem(missing: [0])])
        _ = try source.receive(both, send: sent.outbox.send)
        var kept = samples[1].transfer
        kept.skip = 1
        #expect(sent.take() == [.revisions(Revisions(requestID: batch.requestID, final: true, revisions: [kept]))])
        #expect(store.calls.count == 3, "one call for the batch, then one a document")
        let events = try source.receive(RevisionsAck(requestID: batch.requestID, status: .ok))
        #expect(events == [DocumentEvent(kind: .pushed, documentID: "kept", revision: samples[1].id)])
    }

    @Test("when every revision asked for is gone, an empty final message still lets the peer complete the batch")
    func emptyFinalMessage() throws {
        _ = feed(["gone"])
        let source = source()
        try pump(source)
        let batch = try #require(sent.take().first?.changes)
        _ = try source.receive(ChangesReply(requestID: batch.requestID, items: [ChangesReplyItem(missing: [0])]), send: sent.outbox.send)
        #expect(sent.take() == [.revisions(Revisions(requestID: batch.requestID, final: true, revisions: []))])
        #expect(try source.receive(RevisionsAck(requestID: batch.requestID, status: .ok)).isEmpty)
        #expect(source.acknowledgedSequence == 1)
    }

    @Test("documents the peer refused are reported and not counted as pushed; a rejected batch is the peer's refusal")
    func refusalsAndRejection() throws {
        let samples = feed(["a", "b", "c"])
        for sample in samples { store.supply(sample.foreign) }
        let source = source(batchSize: 2)
        try pump(source)
        let batches = sent.take().compactMap(\.changes)
        let all = ChangesReplyItem(missing: [0])
        _ = try source.receive(ChangesReply(requestID: batches[0].requestID, items: [all, all]), send: sent.outbox.send)
        _ = try source.receive(ChangesReply(requestID: batches[1].requestID, items: [all]), send: sent.outbox.send)

        let refusal = RevisionsAck.Refusal(documentID: "a", reason: "revision does not match its content")
        let events = try source.receive(RevisionsAck(requestID: batches[0].requestID, status: .okWithRefusals([refusal])))
        #expect(events == [
            DocumentEvent(kind: .refusedByPeer, documentID: "a", detail: "revision does not match its content"),
            DocumentEvent(kind: .pushed, documentID: "b", revision: samples[1].id),
        ])
        let rejected = RevisionsAck(requestID: batches[1].requestID, status: .rejected(code: .storageFailure, message: "disk full"))
        let rejection = thrown { try source.receive(rejected) }
        guard case .peerRejected(let detail) = rejection else {
            Issue.record("a rejected batch is the peer's refusal, got \(String(describing: rejection))")
            return
        }
        #expect(detail.contains("disk full"))
        #expect(source.acknowledgedSequence == 2, "a rejected batch does not advance what the peer acknowledged")
    }

    @Test("replies and acks that name nothing awaited are violations: unknown request, wrong item count, index beyond the entry, a second reply")
    func violations() throws {
        _ = feed(["a", "b"])
        store.supply(SampleRevision("a").foreign)
        let source = source(batchSize: 1, window: 2)
        try pump(source)
        let batches = sent.take().compactMap(\.changes)
        let unknown = thrown { try source.receive(ChangesReply(requestID: 99, items: [.complete]), send: sent.outbox.send) }
        #expect(unknown?.invalidReference == "changesReply for unknown request 99")
        let long = thrown { try source.receive(ChangesReply(requestID: batches[0].requestID, items: [.complete, .complete]), send: sent.outbox.send) }
        #expect(long?.invalidReference == "changesReply has 2 items for 1 entries")
        let early = thrown { try source.receive(RevisionsAck(requestID: batches[0].requestID, status: .ok)) }
        #expect(early?.invalidReference == "revisionsAck for unknown request \(batches[0].requestID)")

        _ = try source.receive(ChangesReply(requestID: batches[0].requestID, items: [ChangesReplyItem(missing: [0])]), send: sent.outbox.send)
        let again = thrown { try source.receive(ChangesReply(requestID: batches[0].requestID, items: [.complete]), send: sent.outbox.send) }
        #expect(again?.invalidReference == "changesReply for unknown request \(batches[0].requestID)")
        let beyond = thrown {
            try source.receive(ChangesReply(requestID: batches[1].requestID, items: [ChangesReplyItem(missing: [1])]), send: sent.outbox.send)
        }
        #expect(beyond?.invalidReference == "changesReply asks for a revision index beyond entry 0")
        #expect(sent.take().compactMap(\.revisions).count == 1, "only the valid reply sent revisions")
    }

    @Test("batches complete in order: a later batch done first does not move the acknowledged sequence past an earlier one")
    func completesInOrder() throws {
        _ = feed(["a", "b", "c"])
        let source = source(batchSize: 1, window: 2)
        try pump(source)
        let batches = sent.take().compactMap(\.changes)
        _ = try source.receive(nothingMissing(batches[1]), send: sent.outbox.send)
        #expect(source.acknowledgedSequence == 0 && source.progress.completed == 0)
        _ = try source.receive(nothingMissing(batches[0]), send: sent.outbox.send)
        #expect(source.acknowledgedSequence == 2 && source.progress.completed == 2)
    }

    @Test("the source serves what both its push filter and the subscriber's filter accept")
    func intersectsFilters() throws {
        let samples = feed(["shared/a", "other/b", "shared/c", "shared/d"])
        for sample in samples { store.setBody(.object([:]), of: sample.documentID, revision: sample.id) }
        let source = source(asked: .docIDs(["shared/a", "other/b", "shared/c"]), serving: .idPrefix("shared/"), batchSize: 10)
        try pump(source)
        #expect(sent.take().first?.changes?.entries == [samples[0].entry(sequence: 1), samples[2].entry(sequence: 3)])
    }

    @Test("a deletion outside both id filters is not served")
    func intersectionHoldsForDeletions() throws {
        let gone = SampleRevision("other/gone")
        store.appendChange("other/gone", [LeafRevision(id: gone.id, kind: .deleted)], sequence: 1, deleted: true)
        let source = source(asked: .docIDs(["shared/a"]), serving: .idPrefix("shared/"), batchSize: 10)
        try pump(source)
        let entries = try #require(sent.take().first?.changes).entries
        // Each id filter is asked on its own: neither holds the document.
        #expect(entries.isEmpty)
    }

    @Test("a predicate filter reads the current body of live documents; a deletion always passes")
    func predicateReadsBodies() throws {
        let keep = SampleRevision("keep"), drop = SampleRevision("drop"), gone = SampleRevision("gone")
        store.appendChange("keep", [keep.leaf], sequence: 1)
        store.appendChange("drop", [drop.leaf], sequence: 2)
        store.appendChange("gone", [LeafRevision(id: gone.id, kind: .deleted)], sequence: 3, deleted: true)
        store.setBody(.object(["public": .bool(true)]), of: "keep", revision: keep.id)
        store.setBody(.object(["public": .bool(false)]), of: "drop", revision: drop.id)
        let onlyPublic = ReplicationFilter.predicate(name: "public") { _, body in body == .object(["public": .bool(true)]) }
        let source = source(serving: onlyPublic, batchSize: 10)
        try pump(source)
        #expect(sent.take().first?.changes?.entries.map(\.docID) == ["keep", "gone"])
        #expect(store.calls == [.changesPage(since: 0, limit: 10), .get("keep"), .get("drop")])
    }

    @Test("a failing changes feed throws the store's error and sends nothing")
    func feedFailure() {
        _ = feed(["a"])
        store.fail(.changesPage)
        let source = source()
        #expect(throws: StoreError.self) { try pump(source) }
        #expect(sent.take().isEmpty && !source.hasBatchesInFlight)
    }
}
