import CanopyCore
import CanopyStore
import CanopyWire
import Testing
@testable import CanopyReplication

/// The target side of this node's subscription (§6.4–6.7): revision diffs, writes with their
/// checkpoint, acknowledgements. Driven with wire messages over a store in memory.
@Suite("Subscription target")
struct SubscriptionTargetTests {
    let store = FakeReplicationStore()
    let replicationID = [UInt8](repeating: 0x3E, count: 16)
    /// A document the store lacks, and one whose revision it holds.
    let wanted = SampleRevision("wanted"), held = SampleRevision("held")

    init() {
        store.hold([held.id], of: "held")
    }

    var checkpointID: String { ReplicationIdentity.checkpointDocumentID(replicationID) }

    func target(since: UInt64 = 0, filter: ReplicationFilter = .all, namesRefusals: Bool = true) -> SubscriptionTarget {
        SubscriptionTarget(
            subscriptionID: 5, replicationID: replicationID, filter: filter, store: store, session: "a1b2c3",
            since: since, localCheckpoint: nil, namesRefusals: namesRefusals)
    }

    /// The received revisions of one `revisions` message, resolved and checked as the session does.
    func checked(
        _ target: SubscriptionTarget, _ requestID: RequestID, _ revisions: [ReceivedRevision], final: Bool = true
    ) throws -> SubscriptionTarget.CheckedMessage {
        let foreign = try target.foreignRevisions(requestID: requestID, revisions: revisions).revisions
        return SubscriptionTarget.CheckedMessage(requestID: requestID, final: final, batch: try DocumentStore.checkForeign(foreign))
    }

    /// Receives one batch a sample, request ids and sequences counting from 1, the last caughtUp.
    func receiveBatches(_ target: SubscriptionTarget, _ samples: [SampleRevision]) throws {
        for (index, sample) in samples.enumerated() {
            let number = UInt64(index + 1)
            _ = try target.receive(Changes(
                requestID: number, subscriptionID: 5, caughtUp: index == samples.count - 1, entries: [sample.entry(sequence: number)]))
        }
    }

    /// Prepares, performs and finishes one write, as the session does with its writer.
    func write(
        _ target: SubscriptionTarget, _ messages: [SubscriptionTarget.CheckedMessage]
    ) throws -> (acks: [RevisionsAck], completion: SubscriptionTarget.Completion) {
        let write = try #require(try target.prepareWrite(messages))
        let events = try write.perform().get()
        return target.finish(write, events: events)
    }

    @Test("a document outside the id prefix subscribed to is refused as its revisions arrive: nothing of it is written, the rest is, and the acknowledgement names it")
    func entryOutsideTheScopeIsRefused() throws {
        let inside = SampleRevision("note:1"), outside = SampleRevision("secret")
        let target = target(filter: .idPrefix("note:"))
        let reply = try target.receive(Changes(requestID: 1, subscriptionID: 5, caughtUp: true, entries: [
            outside.entry(sequence: 1), inside.entry(sequence: 2),
        ]))
        #expect(reply == ChangesReply(requestID: 1, items: [ChangesReplyItem(missing: [0]), ChangesReplyItem(missing: [0])]))
        let received = try target.foreignRevisions(requestID: 1, revisions: [outside.received(sequence: 1), inside.received(sequence: 2)])
        #expect(received.revisions.map(\.documentID) == ["note:1"])
        #expect(received.refused.map(\.documentID) == ["secret"] && received.refused.first?.kind == .rejected)
        #expect(received.refused.first?.detail?.contains("outside the documents this node lets the peer write") == true)
        let message = SubscriptionTarget.CheckedMessage(requestID: 1, final: true, batch: try DocumentStore.checkForeign(received.revisions))
        let (acks, _) = try write(target, [message])
        guard case .okWithRefusals(let refusals)? = acks.first?.status else {
            Issue.record("the acknowledgement names no refusal: \(acks)")
            return
        }
        #expect(refusals.map(\.documentID) == ["secret"])
    }

    @Test("changesReply lists each entry's missing revisions by index, with the store's possible ancestors; what the store holds is complete")
    func revisionDiff() throws {
        let new = SampleRevision("new")
        let older = SampleRevision("branched", content: "1"), newer = RevisionID(generation: 2, digestHigh: 7, digestLow: 7)
        store.hold([older.id], of: "branched")
        let target = target()
        let changes = Changes(requestID: 1, subscriptionID: 5, caughtUp: false, entries: [
            held.entry(sequence: 1), new.entry(sequence: 2),
            ChangesEntry(sequence: 3, docID: "branched", revisions: [LeafRevision(id: newer, kind: .live), older.leaf]),
        ])
        let reply = try target.receive(changes)
        #expect(reply == ChangesReply(requestID: 1, items: [
            .complete, ChangesReplyItem(missing: [0]), ChangesReplyItem(missing: [0], knownAncestors: [older.id]),
        ]))
        #expect(store.calls == [.revsDiff([
            RevisionOffer(documentID: "held", revisions: [held.id]), RevisionOffer(documentID: "new", revisions: [new.id]),
            RevisionOffer(documentID: "branched", revisions: [newer, older.id]),
        ])])
        #expect(target.progress == ReplicationProgress(completed: 0, total: 3))
        #expect(target.hasBatchesInFlight)
    }

    @Test("a batch that needs nothing is complete at once: its checkpoint is written alone, and caughtUp is reported after that write")
    func checkpointOnlyWrite() throws {
        let target = target()
        _ = try target.receive(Changes(requestID: 1, subscriptionID: 5, caughtUp: true, entries: [held.entry(sequence: 4)]))
        store.clearCalls()
        let (acks, completion) = try write(target, [])
        #expect(acks.isEmpty)
        #expect(completion.checkpoint == 4 && completion.caughtUp)
        #expect(store.calls == [.bulkInsertForeign(documentIDs: [], local: checkpointID)])
        let recorded = ReplicationCheckpoint(current: .init(session: "a1b2c3", sequence: 4))
        #expect(store.local(checkpointID) == recorded.json)
        #expect(target.currentCheckpoint == recorded)
        #expect(target.isDrained && target.progress.completed == 1)
        #expect(try target.prepareWrite([]) == nil, "nothing is left to write")
    }

    @Test("revisions asked for are written in one transaction with the checkpoint they complete, then acknowledged")
    func writesAndAcknowledges() throws {
        let target = target()
        _ = try target.receive(Changes(requestID: 1, subscriptionID: 5, caughtUp: false, entries: [wanted.entry(sequence: 3), held.entry(sequence: 4)]))
        // Until its final revisions arrive, the batch reaches no checkpoint: nothing to write.
        #expect(try target.prepareWrite([]) == nil)
        store.clearCalls()

        let (acks, completion) = try write(target, [try checked(target, 1, [wanted.received(sequence: 3)])])
        #expect(store.calls == [.bulkInsertForeign(documentIDs: ["wanted"], local: checkpointID)])
        #expect(acks == [RevisionsAck(requestID: 1, status: .ok)])
        #expect(completion.checkpoint == 4 && !completion.caughtUp)
        #expect(completion.events == [DocumentEvent(kind: .pulled, documentID: "wanted", revision: wanted.id)])
        #expect(target.lastSequence == 4 && target.isDrained)
    }

    @Test("a message that is not final completes nothing: it is written without a checkpoint and not acknowledged")
    func partialMessage() throws {
        let first = SampleRevision("first"), second = SampleRevision("second")
        let target = target()
        _ = try target.receive(Changes(requestID: 1, subscriptionID: 5, caughtUp: false, entries: [first.entry(sequence: 1), second.entry(sequence: 2)]))
        store.clearCalls()
        let (acks, completion) = try write(target, [try checked(target, 1, [first.received(sequence: 1)], final: false)])
        #expect(acks.isEmpty && completion.checkpoint == nil)
        #expect(store.calls == [.bulkInsertForeign(documentIDs: ["first"], local: nil)])
        let (lastAcks, last) = try write(target, [try checked(target, 1, [second.received(sequence: 2)])])
        #expect(lastAcks == [RevisionsAck(requestID: 1, status: .ok)] && last.checkpoint == 2)
    }

    @Test("the checkpoint covers a batch only once every batch before it is complete")
    func checkpointWaitsForEarlierBatches() throws {
        let target = target()
        try receiveBatches(target, [wanted, held])
        // Batch 2 needed nothing, but batch 1 is still open: no checkpoint, no write.
        #expect(try target.prepareWrite([]) == nil)
        let (acks, completion) = try write(target, [try checked(target, 1, [wanted.received(sequence: 1)])])
        #expect(acks == [RevisionsAck(requestID: 1, status: .ok)])
        #expect(completion.checkpoint == 2 && completion.caughtUp)
        #expect(target.isDrained)
    }

    @Test(
        "a revision whose id is not the hash of its body is refused and the rest written; the ack names it when the peer takes refusals",
        arguments: [true, false])
    func refusesBadRevision(namesRefusals: Bool) throws {
        let forged = SampleRevision("forged").tampered, good = SampleRevision("good")
        let target = target(namesRefusals: namesRefusals)
        _ = try target.receive(Changes(requestID: 1, subscriptionID: 5, caughtUp: false, entries: [forged.entry(sequence: 1), good.entry(sequence: 2)]))
        store.clearCalls()
        let (acks, completion) = try write(target, [try checked(target, 1, [forged.received(sequence: 1), good.received(sequence: 2)])])
        #expect(store.calls == [.bulkInsertForeign(documentIDs: ["good"], local: checkpointID)])
        #expect(completion.events.map(\.kind) == [.rejected, .pulled])
        #expect(completion.events.map(\.documentID) == ["forged", "good"])
        #expect(completion.checkpoint == 2, "the refused document is checkpointed past, not retried")
        let ack = try #require(acks.first)
        if namesRefusals {
            guard case .okWithRefusals(let refusals) = ack.status else {
                Issue.record("expected the refusal named, got \(ack.status)")
                return
            }
            #expect(refusals.map(\.documentID) == ["forged"])
            #expect(refusals.first?.reason.contains("does not match its content") == true)
        } else {
            #expect(ack.status == .ok)
        }
    }

    @Test("a document the store refuses at insert is left out and the rest written again; a problem naming no document is a protocol violation")
    func insertRefusals() throws {
        let first = SampleRevision("first"), second = SampleRevision("second")
        let target = target()
        _ = try target.receive(Changes(requestID: 1, subscriptionID: 5, caughtUp: false, entries: [first.entry(sequence: 1), second.entry(sequence: 2)]))
        let message = try checked(target, 1, [first.received(sequence: 1), second.received(sequence: 2)])
        store.clearCalls()
        store.refuseNextInserts([.invalidHistory(documentID: "first", detail: "scripted")])
        let write = try #require(try target.prepareWrite([message]))
        let events = try write.perform().get()
        #expect(events.map(\.kind) == [.rejected, .pulled] && events.map(\.documentID) == ["first", "second"])
        #expect(store.calls == [
            .bulkInsertForeign(documentIDs: ["first", "second"], local: checkpointID),
            .bulkInsertForeign(documentIDs: ["second"], local: checkpointID),
        ])

        store.refuseNextInserts([.batchTooLarge(count: 2, limit: 1)])
        guard case .failure(.protocolViolation(.invalidDocument)) = write.perform() else {
            Issue.record("a problem that names no document must be a protocol violation")
            return
        }
        store.fail(.bulkInsertForeign)
        guard case .failure(.store) = write.perform() else {
            Issue.record("a failing store must be an operating error")
            return
        }
    }

    @Test("changes for another subscription, going backwards, or naming a document twice are violations; a failing diff is a store error")
    func changesViolations() throws {
        let a = SampleRevision("a"), b = SampleRevision("b")
        let target = target()
        let other = thrown { try target.receive(Changes(requestID: 1, subscriptionID: 6, caughtUp: false, entries: [a.entry(sequence: 1)])) }
        #expect(other?.invalidReference == "changes for unknown subscription 6")
        let twice = thrown { try target.receive(Changes(requestID: 1, subscriptionID: 5, caughtUp: false, entries: [a.entry(sequence: 1), a.entry(sequence: 2)])) }
        #expect(twice?.invalidReference == "document listed twice in one batch")
        _ = try target.receive(Changes(requestID: 2, subscriptionID: 5, caughtUp: false, entries: [a.entry(sequence: 5)]))
        let backwards = thrown { try target.receive(Changes(requestID: 3, subscriptionID: 5, caughtUp: false, entries: [b.entry(sequence: 5)])) }
        #expect(backwards?.invalidReference == "changes sequences went backwards (5 after 5)")
        store.fail(.revsDiff)
        #expect(thrown { try target.receive(Changes(requestID: 4, subscriptionID: 5, caughtUp: false, entries: [b.entry(sequence: 6)])) }?.isStoreFailure == true)
    }

    @Test("revisions for a request not awaiting them are violations; a message whose check failed as a whole is invalidDocument")
    func revisionsViolations() throws {
        let target = target()
        try receiveBatches(target, [held, wanted])
        let unknown = thrown { try target.foreignRevisions(requestID: 9, revisions: []) }
        #expect(unknown?.invalidReference == "revisions for unknown request 9")
        let complete = thrown { try target.foreignRevisions(requestID: 1, revisions: [held.received(sequence: 1)]) }
        #expect(complete?.invalidReference == "revisions for unknown request 1", "a batch that needed nothing takes no revisions")
        let problem = StoreInputError.batchTooLarge(count: 5000, limit: 4096)
        guard case .protocolViolation(.invalidDocument(let detail)) = thrown({ try target.refuse(requestID: 2, problem: problem) }) else {
            Issue.record("a failed check must be invalidDocument")
            return
        }
        #expect(detail == problem.description)
    }

    @Test("a predicate filter leaves out received revisions whose body it rejects")
    func filtersReceivedBodies() throws {
        let keep = SampleRevision("keep", content: "public"), drop = SampleRevision("drop", content: "private")
        let onlyPublic = ReplicationFilter.predicate(name: "public") { _, body in
            if case .object(let fields)? = body { return fields["content"] == .string("public") }
            return false
        }
        let target = target(filter: onlyPublic)
        _ = try target.receive(Changes(requestID: 1, subscriptionID: 5, caughtUp: false, entries: [keep.entry(sequence: 1), drop.entry(sequence: 2)]))
        let foreign = try target.foreignRevisions(requestID: 1, revisions: [keep.received(sequence: 1), drop.received(sequence: 2)])
        #expect(foreign.revisions.map(\.documentID) == ["keep"] && foreign.refused.isEmpty)
    }
}
