import CanopyCore
import Testing
@testable import CanopyWire

/// Random but valid conversations between two machines: whatever batch sizes, reply shapes,
/// revision splits, skips and interleavings a seed picks, no valid message is refused and every
/// table is empty once all batches are acknowledged.
@Suite("Connection state machine properties")
struct StateMachinePropertyTests {
    typealias Pair = ConnectionStateMachineTests.Pair

    /// Delivers `message` from `sender` to the other machine, expecting no violation.
    private func transmit(_ message: Message, aToB: Bool, pair: inout Pair) {
        let actions = aToB ? pair.aSends(message) : pair.bSends(message)
        for action in actions {
            if case .closeTransport(let code) = action { Issue.record("valid \(message.type) refused with \(code)") }
        }
    }

    @Test("random valid batches flow in both directions and leave nothing outstanding", arguments: 0..<40)
    func conversations(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        var pair = Pair()
        // A subscribes to B (continuous) and B to A: each side is source and target at once.
        transmit(.subscribe(Subscribe(requestID: 1, replicationID: [1], since: 0, continuous: true, filter: .none)), aToB: false, pair: &pair)
        transmit(.subscribe(Subscribe(requestID: 1, replicationID: [2], since: 0, continuous: true, filter: .none)), aToB: true, pair: &pair)
        var sequences: [Bool: UInt64] = [true: 0, false: 0]
        var nextRequest: [Bool: UInt64] = [true: 10, false: 10]
        for _ in 0..<30 {
            // Direction true: A is the source. Each batch completes before the next in this test;
            // the two directions interleave message by message.
            let direction = random.next() & 1 == 0
            let requestID = nextRequest[direction]!
            nextRequest[direction]! += 1
            var generator = RandomMessages(seed: random.next())
            let entries = (0..<random.index(below: 6)).map { _ -> ChangesEntry in
                sequences[direction]! += UInt64(random.index(below: 5) + 1)
                let leaves = (0..<(random.index(below: 3) + 1)).map { _ in
                    LeafRevision(id: RevisionID(generation: random.index(below: 20) + 1, digestHigh: random.next(),
                                                digestLow: random.next()), kind: .live)
                }
                return ChangesEntry(sequence: sequences[direction]!, docID: generator.docID(), revisions: leaves)
            }
            let changes = Changes(requestID: requestID, subscriptionID: 1, caughtUp: random.next() & 1 == 0, entries: entries)
            transmit(.changes(changes), aToB: direction, pair: &pair)
            runBatch(changes, sourceIsA: direction, random: &random, pair: &pair)
        }
        #expect(pair.a.tables.outgoingBatches.isEmpty && pair.a.tables.incomingBatches.isEmpty)
        #expect(pair.b.tables.outgoingBatches.isEmpty && pair.b.tables.incomingBatches.isEmpty)
        #expect(pair.a.violation == nil && pair.b.violation == nil)
    }

    /// Answers `changes` with a random reply, then sends the missing revisions in random splits
    /// with random skips and valid ancestry, then acknowledges.
    private func runBatch(_ changes: Changes, sourceIsA: Bool, random: inout SplitMix64, pair: inout Pair) {
        var items: [ChangesReplyItem] = []
        var wanted: [(entry: Int, revision: Int, known: [RevisionID])] = []
        for (entryIndex, entry) in changes.entries.enumerated() {
            let missing = entry.revisions.indices.filter { _ in random.next() % 3 != 0 }
            if missing.isEmpty { items.append(.complete); continue }
            let known = (0..<random.index(below: 3)).map { _ in
                RevisionID(generation: random.index(below: 3) + 1, digestHigh: random.next(), digestLow: random.next())
            }
            items.append(ChangesReplyItem(missing: missing, knownAncestors: known))
            for index in missing { wanted.append((entryIndex, index, known)) }
        }
        transmit(.changesReply(ChangesReply(requestID: changes.requestID, items: items)), aToB: !sourceIsA, pair: &pair)
        if wanted.isEmpty { return }
        var transfers: [RevisionTransfer] = []
        var skip = 0
        for want in wanted {
            if random.next() % 5 == 0 { skip += 1; continue }
            let generation = changes.entries[want.entry].revisions[want.revision].id.generation
            // Use a known ancestor as the tail when its generation fits below the revision.
            let tailIndex = want.known.firstIndex { $0.generation < generation }
            let count = tailIndex.map { generation - 1 - want.known[$0].generation } ?? random.index(below: generation)
            let ancestry = (0..<min(count, 3)).map { _ in RevisionDigest(high: random.next(), low: random.next()) }
            let tail = ancestry.count == count ? tailIndex.map { $0 + 1 } ?? 0 : 0
            transfers.append(RevisionTransfer(skip: skip, ancestry: ancestry, knownAncestorTail: tail, body: [0x7B, 0x7D]))
            skip = 0
        }
        let split = transfers.isEmpty ? 0 : random.index(below: transfers.count + 1)
        if split > 0 {
            transmit(.revisions(Revisions(requestID: changes.requestID, final: false, revisions: Array(transfers[..<split]))),
                     aToB: sourceIsA, pair: &pair)
        }
        transmit(.revisions(Revisions(requestID: changes.requestID, final: true, revisions: Array(transfers[split...]))),
                 aToB: sourceIsA, pair: &pair)
        transmit(.revisionsAck(RevisionsAck(requestID: changes.requestID, status: .ok)), aToB: !sourceIsA, pair: &pair)
    }
}
