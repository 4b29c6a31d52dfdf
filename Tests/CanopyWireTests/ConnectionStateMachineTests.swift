import CanopyCore
import Testing
@testable import CanopyWire

@Suite("Connection state machine")
struct ConnectionStateMachineTests {
    static let databaseA = [UInt8](repeating: 0xA, count: 16)
    static let databaseB = [UInt8](repeating: 0xB, count: 16)

    /// Two connected machines (A the source of changes, B the subscriber) after both hellos.
    struct Pair {
        var a = ConnectionStateMachine(localHello: Hello(databaseID: databaseA, revsLimit: 1000, window: 2))
        var b = ConnectionStateMachine(localHello: Hello(databaseID: databaseB, revsLimit: 5, window: 2))

        init() {
            let helloA = a.start(), helloB = b.start()
            guard case .send(let fromA) = helloA[0], case .send(let fromB) = helloB[0] else { fatalError("no hello") }
            #expect(b.receive(Self.wire(fromA)) == [.deliver(fromA)])
            #expect(a.receive(Self.wire(fromB)) == [.deliver(fromB)])
        }

        /// The message as the peer sees it: encoded and decoded again.
        static func wire(_ message: Message) -> Message {
            try! Message.decode(message.encoded())
        }

        mutating func aSends(_ message: Message) -> [ConnectionStateMachine.Action] {
            a.send(message)
            return b.receive(Self.wire(message))
        }

        mutating func bSends(_ message: Message) -> [ConnectionStateMachine.Action] {
            b.send(message)
            return a.receive(Self.wire(message))
        }
    }

    static func rev(_ generation: Int, _ tag: UInt64) -> RevisionID {
        RevisionID(generation: generation, digestHigh: tag, digestLow: ~tag)
    }

    static let subscribe = Message.subscribe(
        Subscribe(requestID: 1, replicationID: [1, 2, 3], since: 0, continuous: false, filter: .none))

    /// A batch: doc "a" at 3-x (B has 1-p), doc "b" new at 1-y, doc "c" with two leaves.
    static let changes = Changes(requestID: 7, subscriptionID: 1, caughtUp: false, entries: [
        ChangesEntry(sequence: 10, docID: "a", revisions: [LeafRevision(id: rev(3, 0x33), kind: .live)]),
        ChangesEntry(sequence: 11, docID: "b", revisions: [LeafRevision(id: rev(1, 0x11), kind: .live)]),
        ChangesEntry(sequence: 15, docID: "c", revisions: [
            LeafRevision(id: rev(2, 0x21), kind: .deleted), LeafRevision(id: rev(2, 0x22), kind: .closed)]),
    ])

    static let reply = ChangesReply(requestID: 7, items: [
        ChangesReplyItem(missing: [0], knownAncestors: [rev(1, 0x10)]),
        ChangesReplyItem(missing: [0]),
        .complete,
    ])

    static func transfer(ancestry: [UInt64], tail: Int, body: String, skip: Int = 0) -> RevisionTransfer {
        RevisionTransfer(skip: skip, ancestry: ancestry.map { RevisionDigest(of: rev(1, $0)) },
                         knownAncestorTail: tail, body: Array(body.utf8))
    }

    @Test("a whole batch flows: subscribe, changes, reply, revisions in two messages, ack")
    func happyPath() throws {
        var pair = Pair()
        #expect(pair.bSends(Self.subscribe) == [.deliver(Self.subscribe)])
        #expect(pair.a.canSendChanges)
        #expect(pair.aSends(.changes(Self.changes)) == [.deliver(.changes(Self.changes))])
        #expect(pair.bSends(.changesReply(Self.reply)) == [.deliver(.changesReply(Self.reply))])

        // Doc "a": 3-x with parent 2-0x32, which continues at B's known 1-0x10.
        let first = Revisions(requestID: 7, final: false, revisions: [Self.transfer(ancestry: [0x32], tail: 1, body: "{}")])
        let actions = pair.aSends(.revisions(first))
        let path = try RevisionPath(leaf: Self.rev(3, 0x33), kind: .live, ancestors: [
            RevisionID(generation: 2, digestHigh: 0x32, digestLow: ~0x32), Self.rev(1, 0x10)])
        #expect(actions == [.deliverRevisions(requestID: 7, final: false, revisions: [
            ReceivedRevision(docID: "a", sequence: 10, path: path, body: Array("{}".utf8))])])

        let second = Revisions(requestID: 7, final: true, revisions: [Self.transfer(ancestry: [], tail: 0, body: "{\"n\":1}")])
        guard case .deliverRevisions(_, true, let received) = pair.aSends(.revisions(second)).first else {
            Issue.record("second revisions not delivered"); return
        }
        #expect(received.map(\.docID) == ["b"])
        #expect(received[0].path.ancestors.isEmpty)

        let ack = Message.revisionsAck(RevisionsAck(requestID: 7, status: .ok))
        #expect(pair.bSends(ack) == [.deliver(ack)])
        #expect(pair.a.tables.outgoingBatches.isEmpty && pair.b.tables.incomingBatches.isEmpty)
    }

    @Test("anything but hello before the peer's hello is unexpectedMessage and closes")
    func beforeHello() {
        var machine = ConnectionStateMachine(localHello: Hello(databaseID: Self.databaseA, revsLimit: 10, window: 1))
        let actions = machine.receive(Self.subscribe)
        #expect(actions.last == .closeTransport(code: .unexpectedMessage))
        guard case .send(.close(let close)) = actions.first else { Issue.record("no close sent"); return }
        #expect(close.code == .unexpectedMessage)
        #expect(machine.state == .closed)
        #expect(machine.violation == .unexpectedMessage(messageType: "subscribe", state: "awaitingHello"))
        #expect(machine.receive(.heartbeat) == [])
    }

    @Test("a second hello is unexpectedMessage")
    func secondHello() {
        var pair = Pair()
        let actions = pair.b.receive(.hello(pair.a.localHello))
        #expect(actions.last == .closeTransport(code: .unexpectedMessage))
    }

    @Test("replies, revisions and acks that answer nothing outstanding are fatal")
    func unknownRequests() {
        var pair = Pair()
        #expect(pair.a.receive(.changesReply(Self.reply)).last == .closeTransport(code: .invalidReference))
        var other = Pair()
        _ = other.bSends(Self.subscribe)
        _ = other.aSends(.changes(Self.changes))
        // Revisions before B replied.
        let early = Revisions(requestID: 7, final: true, revisions: [])
        #expect(other.b.receive(.revisions(early)).last == .closeTransport(code: .invalidReference))
        var third = Pair()
        #expect(third.a.receive(.revisionsAck(RevisionsAck(requestID: 9, status: .ok))).last
            == .closeTransport(code: .invalidReference))
        var fourth = Pair()
        #expect(fourth.a.receive(.checkpoint(Checkpoint(requestID: 3, value: nil))).last == .closeTransport(code: .invalidReference))
    }

    /// A pair whose batch 7 is transferring (B replied).
    static func transferring() -> Pair {
        var pair = Pair()
        _ = pair.bSends(subscribe)
        _ = pair.aSends(.changes(changes))
        _ = pair.bSends(.changesReply(reply))
        return pair
    }

    @Test("revisions beyond those asked for are invalidReference")
    func beyondAsked() {
        var pair = Self.transferring()
        let tooFar = Revisions(requestID: 7, final: true, revisions: [Self.transfer(ancestry: [], tail: 0, body: "{}", skip: 2)])
        #expect(pair.b.receive(.revisions(tooFar)).last == .closeTransport(code: .invalidReference))
        #expect(pair.b.violation == .invalidReference(detail: "revision position 2 of 2 asked for"))
    }

    @Test("an ancestry longer than the generation allows, or ending at the wrong generation, is invalidRevision")
    func badAncestry() {
        var pair = Self.transferring()
        // 3-x with three ancestors: generations would reach 0.
        let tooLong = Revisions(requestID: 7, final: false, revisions: [Self.transfer(ancestry: [1, 2, 3], tail: 0, body: "{}")])
        #expect(pair.b.receive(.revisions(tooLong)).last == .closeTransport(code: .invalidRevision))

        var other = Self.transferring()
        // No ancestry digests but "continues at known 1-p": 3-x's parent would be generation 1.
        let gap = Revisions(requestID: 7, final: false, revisions: [Self.transfer(ancestry: [], tail: 1, body: "{}")])
        #expect(other.b.receive(.revisions(gap)).last == .closeTransport(code: .invalidRevision))

        var third = Self.transferring()
        let noSuchKnown = Revisions(requestID: 7, final: false, revisions: [Self.transfer(ancestry: [0x32], tail: 2, body: "{}")])
        #expect(third.b.receive(.revisions(noSuchKnown)).last == .closeTransport(code: .invalidReference))
    }

    @Test("a cut parent becomes the path's root parent, one generation below its oldest revision")
    func cutParent() throws {
        var pair = Self.transferring()
        // 3-x cut after its parent 2-0x32; the source names 2-0x32's parent 1-0x31 as a link.
        var transfer = Self.transfer(ancestry: [0x32], tail: 0, body: "{}")
        transfer.cutParent = RevisionDigest(of: Self.rev(1, 0x31))
        let actions = pair.b.receive(.revisions(Revisions(requestID: 7, final: false, revisions: [transfer])))
        guard case .deliverRevisions(_, false, let received) = actions.first else {
            Issue.record("revisions not delivered: \(actions)"); return
        }
        #expect(received[0].path.ancestors == [RevisionID(generation: 2, digestHigh: 0x32, digestLow: ~0x32)])
        #expect(received[0].path.rootParent == Self.rev(1, 0x31))

        // 3-x with two ancestors reaches generation 1: a cut parent would be generation 0.
        var other = Self.transferring()
        var belowRoot = Self.transfer(ancestry: [0x32, 0x31], tail: 0, body: "{}")
        belowRoot.cutParent = RevisionDigest(of: Self.rev(1, 0x30))
        #expect(other.b.receive(.revisions(Revisions(requestID: 7, final: false, revisions: [belowRoot]))).last
            == .closeTransport(code: .invalidRevision))
    }

    @Test("an ancestry beyond our announced revsLimit is accepted: the source sends every link it holds")
    func beyondRevsLimit() {
        var pair = Pair()
        _ = pair.bSends(Self.subscribe)
        let deep = Changes(requestID: 8, subscriptionID: 1, caughtUp: true, entries: [
            ChangesEntry(sequence: 1, docID: "d", revisions: [LeafRevision(id: Self.rev(50, 1), kind: .live)])])
        _ = pair.aSends(.changes(deep))
        _ = pair.bSends(.changesReply(ChangesReply(requestID: 8, items: [ChangesReplyItem(missing: [0])])))
        // B announced revsLimit 5; five ancestors and a cut parent still arrive whole.
        var five = Self.transfer(ancestry: [1, 2, 3, 4, 5], tail: 0, body: "{}")
        five.cutParent = RevisionDigest(of: Self.rev(44, 6))
        let actions = pair.b.receive(.revisions(Revisions(requestID: 8, final: true, revisions: [five])))
        guard case .deliverRevisions(_, _, let received)? = actions.first else {
            Issue.record("expected the revisions delivered, got \(actions)")
            return
        }
        #expect(received.first?.path.ancestors.count == 5)
        #expect(received.first?.path.rootParent == Self.rev(44, 6))
    }

    @Test("an ancestry beyond our revsLimit that ends at a revision we named as held links to it")
    func beyondRevsLimitToKnownAncestor() throws {
        var pair = Pair()
        _ = pair.bSends(Self.subscribe)
        let deep = Changes(requestID: 8, subscriptionID: 1, caughtUp: true, entries: [
            ChangesEntry(sequence: 1, docID: "d", revisions: [LeafRevision(id: Self.rev(50, 1), kind: .live)])])
        _ = pair.aSends(.changes(deep))
        let held = Self.rev(44, 9)
        _ = pair.bSends(.changesReply(ChangesReply(requestID: 8, items: [ChangesReplyItem(missing: [0], knownAncestors: [held])])))
        // Five ancestors (B's revsLimit is 5), then B's own leaf at generation 44.
        let reaching = Revisions(requestID: 8, final: true, revisions: [Self.transfer(ancestry: [1, 2, 3, 4, 5], tail: 1, body: "{}")])
        let actions = pair.b.receive(.revisions(reaching))
        guard case .deliverRevisions(_, _, let received)? = actions.first else {
            Issue.record("expected the revisions delivered, got \(actions)")
            return
        }
        #expect(received.first?.path.revisions.count == 7)
        #expect(received.first?.path.ancestors.last == held)
    }

    @Test("more changes requests than the announced window is windowExceeded")
    func window() {
        var pair = Pair()
        _ = pair.bSends(.subscribe(Subscribe(requestID: 1, replicationID: [1], since: 0, continuous: true, filter: .none)))
        for id in UInt64(1)...2 {
            let batch = Changes(requestID: 100 + id, subscriptionID: 1, caughtUp: false, entries: [])
            #expect(pair.aSends(.changes(batch)) == [.deliver(.changes(batch))])
        }
        #expect(!pair.a.canSendChanges)
        let third = Changes(requestID: 103, subscriptionID: 1, caughtUp: false, entries: [])
        #expect(pair.b.receive(.changes(third)).last == .closeTransport(code: .windowExceeded))
    }

    @Test("an empty caught-up batch ends a one-shot subscription; a later batch for it is invalidReference")
    func oneShot() {
        var pair = Pair()
        _ = pair.bSends(Self.subscribe)
        let empty = Changes(requestID: 2, subscriptionID: 1, caughtUp: true, entries: [])
        #expect(pair.aSends(.changes(empty)) == [.deliver(.changes(empty))])
        #expect(pair.bSends(.changesReply(ChangesReply(requestID: 2, items: []))).count == 1)
        let late = Changes(requestID: 3, subscriptionID: 1, caughtUp: true, entries: [])
        #expect(pair.b.receive(.changes(late)).last == .closeTransport(code: .invalidReference))
    }

    @Test("a batch already in flight when we unsubscribed is still accepted")
    func unsubscribeRace() {
        var pair = Pair()
        _ = pair.bSends(.subscribe(Subscribe(requestID: 1, replicationID: [1], since: 5, continuous: true, filter: .none)))
        pair.b.send(.unsubscribe(Unsubscribe(subscriptionID: 1)))
        let inFlight = Changes(requestID: 2, subscriptionID: 1, caughtUp: false, entries: [
            ChangesEntry(sequence: 6, docID: "x", revisions: [LeafRevision(id: Self.rev(1, 1), kind: .live)])])
        #expect(pair.b.receive(.changes(inFlight)) == [.deliver(.changes(inFlight))])
    }

    @Test("sequences must keep increasing across batches of a subscription")
    func sequences() {
        var pair = Pair()
        _ = pair.bSends(.subscribe(Subscribe(requestID: 1, replicationID: [1], since: 20, continuous: true, filter: .none)))
        let stale = Changes(requestID: 2, subscriptionID: 1, caughtUp: false, entries: [
            ChangesEntry(sequence: 20, docID: "x", revisions: [LeafRevision(id: Self.rev(1, 1), kind: .live)])])
        #expect(pair.b.receive(.changes(stale)).last == .closeTransport(code: .malformedMessage))
    }

    @Test("a request id still outstanding cannot be reused by the peer")
    func duplicateIDs() {
        var pair = Pair()
        _ = pair.bSends(Self.subscribe)
        #expect(pair.a.receive(.checkpointGet(CheckpointGet(requestID: 1, replicationID: [1]))).last
            == .closeTransport(code: .invalidReference))
    }

    @Test("heartbeat is echoed; close ends the connection and nothing after it is delivered")
    func heartbeatAndClose() {
        var pair = Pair()
        #expect(pair.a.receive(.heartbeat) == [.send(.heartbeatEcho)])
        let close = Message.close(Close(code: .goingAway, reason: "bye"))
        #expect(pair.a.receive(close) == [.deliver(close), .closeTransport(code: .goingAway)])
        #expect(pair.a.state == .closed)
        #expect(pair.a.receive(.heartbeat) == [])
    }

    @Test("after we send close, received messages are discarded until the peer's close")
    func closing() {
        var pair = Pair()
        #expect(pair.a.close(code: .normal, reason: "done") == [.send(.close(Close(code: .normal, reason: "done")))])
        #expect(pair.a.state == .closing)
        #expect(pair.a.receive(Self.subscribe) == [])
        #expect(pair.a.receive(.close(Close(code: .normal, reason: ""))) == [.closeTransport(code: .normal)])
    }

    @Test("an error ends the request it names; an error naming nothing outstanding is fatal")
    func errors() {
        var pair = Pair()
        _ = pair.bSends(Self.subscribe)
        let refusal = Message.error(ErrorMessage(requestID: 1, code: .forbidden, message: "no"))
        #expect(pair.aSends(refusal) == [.deliver(refusal)])
        #expect(pair.b.tables.ourSubscriptions.isEmpty)
        let unknown = Message.error(ErrorMessage(requestID: 99, code: .notFound, message: ""))
        #expect(pair.b.receive(unknown).last == .closeTransport(code: .invalidReference))
    }

    @Test("a close reason longer than the limit is cut at a character boundary")
    func longReason() {
        var pair = Pair()
        let actions = pair.a.close(code: .normal, reason: String(repeating: "é", count: 600))
        guard case .send(.close(let close)) = actions.first else { Issue.record("no close"); return }
        #expect(close.reason.utf8.count == 1024)
    }
}

extension ConnectionStateMachineTests {
    @Test("heartbeats are answered even before the peer's hello, and do not count as the hello")
    func heartbeatBeforeHello() {
        var machine = ConnectionStateMachine(localHello: Hello(databaseID: Self.databaseA, revsLimit: 10, window: 1))
        #expect(machine.receive(.heartbeat) == [.send(.heartbeatEcho)])
        #expect(machine.receive(.heartbeatEcho) == [.deliver(.heartbeatEcho)])
        #expect(machine.state == .awaitingHello)
        #expect(machine.receive(.unsubscribe(Unsubscribe(subscriptionID: 1))).last == .closeTransport(code: .unexpectedMessage))
    }
}
