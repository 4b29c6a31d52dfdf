import CanopyAgent
import CanopyCore
import CanopyReplication
import Testing

@Suite("event ring buffer")
struct EventRingTests {
    @Test("sequence numbers start at 1 and have no gaps")
    func sequencesAreConsecutive() {
        var ring = EventRing(capacity: 4)
        let sequences = (0..<3).map { _ in ring.append(type: "t", time: 0, data: [:]).sequence }
        #expect(sequences == [1, 2, 3])
        #expect(ring.events(after: 0).events.map(\.sequence) == [1, 2, 3])
        #expect(ring.events(after: 2).events.map(\.sequence) == [3])
        #expect(ring.events(after: 3).events.isEmpty)
        #expect(ring.events(after: 99).events.isEmpty)
    }

    @Test("a full ring drops the oldest and says how many a late reader missed")
    func fullRingReportsMissed() {
        var ring = EventRing(capacity: 3)
        for index in 0..<10 { ring.append(type: "t\(index)", time: Double(index), data: [:]) }
        #expect(ring.count == 3)
        #expect(ring.firstSequence == 8)
        let late = ring.events(after: 2)
        #expect(late.events.map(\.sequence) == [8, 9, 10])
        #expect(late.missed == 5)
        let current = ring.events(after: 7)
        #expect(current.events.map(\.type) == ["t7", "t8", "t9"])
        #expect(current.missed == 0)
    }

    @Test("a reader resuming with since misses nothing the ring still holds, at every wrap position")
    func resumeAtEveryPosition() {
        for capacity in 1...5 {
            var ring = EventRing(capacity: capacity)
            for total in 1...12 {
                ring.append(type: "t", time: 0, data: [:])
                for since in 0...UInt64(total) {
                    let (events, missed) = ring.events(after: since)
                    let expectedFirst = max(since + 1, UInt64(max(1, total - capacity + 1)))
                    #expect(events.map(\.sequence) == Array(expectedFirst...UInt64(total + 1)).dropLast().map { $0 })
                    #expect(missed + UInt64(events.count) == UInt64(total) - since)
                }
            }
        }
    }

    @Test("a document event kept as the engine reported it renders the same JSON as one built by hand")
    func documentEventRendersLazily() {
        let revision = RevisionID(generation: 3, digestHigh: 0x0123_4567_89AB_CDEF, digestLow: 42)
        var ring = EventRing(capacity: 4)
        ring.append(.document(nodeID: "NODE", event: DocumentEvent(kind: .pulled, documentID: "doc-1", revision: revision)), time: 7)
        let notes = DatabaseName(validating: "notes")!
        ring.append(.document(nodeID: "NODE", event: DocumentEvent(kind: .rejected, documentID: "doc-2", detail: "bad hash"), database: notes), time: 8)
        let events = ring.events(after: 0).events
        #expect(events.map(\.type) == ["document.changed", "document.rejected"])
        #expect(events[0].data == [
            "node_id": .string("NODE"), "doc": .string("doc-1"), "rev": .string(revision.description), "origin": .string("peer"),
            "db": .string("default"),
        ])
        #expect(events[1].data == ["node_id": .string("NODE"), "doc": .string("doc-2"), "reason": .string("bad hash"), "db": .string("notes")])
        #expect(events[0] == AgentEvent(sequence: 1, type: "document.changed", time: 7, data: events[0].data))
        #expect(events[0] != AgentEvent(sequence: 1, type: "document.rejected", time: 7, data: events[0].data))
        #expect(events[1].line == .object(["event": .object([
            "seq": .int(2), "type": .string("document.rejected"), "time": .double(8),
            "data": .object(["node_id": .string("NODE"), "doc": .string("doc-2"), "reason": .string("bad hash"), "db": .string("notes")]),
        ])]))
    }

    @Test("every document event kind is named as the admin protocol lists it, and a pulled deletion says so")
    func documentEventTypes() {
        let expected: [DocumentEventKind: String] = [
            .pulled: "document.changed", .pushed: "document.pushed", .conflictDetected: "conflict.detected",
            .conflictResolved: "conflict.resolved", .conflictAwaitingResolver: "conflict.waiting",
            .resolutionFailed: "resolution.failed", .rejected: "document.rejected", .refusedByPeer: "push.refused",
        ]
        for kind in DocumentEventKind.allCases {
            let content = AgentEvent.Content.document(nodeID: "N", event: DocumentEvent(kind: kind, documentID: "d"))
            #expect(content.type == expected[kind])
        }
        let deletion = AgentEvent.Content.document(nodeID: "N", event: DocumentEvent(kind: .pulled, documentID: "d", deleted: true))
        #expect(deletion.data["deleted"] == .bool(true))
        let resolved = AgentEvent.Content.document(nodeID: "N", event: DocumentEvent(kind: .conflictResolved, documentID: "d"))
        #expect(resolved.data["by"] == .string("automatic"))
    }

    @Test("batches of document events kept whole: a reader resumes at every position, a batch larger than the ring keeps its newest")
    func documentBatches() {
        // Batches of 0 to 7 events against rings of 1 to 6, mixed with single events: the ring
        // must hold exactly the newest `capacity` events with consecutive sequences, whatever
        // part of a batch it had to drop.
        for capacity in 1...6 {
            var ring = EventRing(capacity: capacity)
            var expected: [(sequence: UInt64, doc: String)] = []
            for round in 0..<9 {
                let size = (round * 5 + capacity) % 8
                let batch = (0..<size).map { DocumentEvent(kind: .pulled, documentID: "d\(round)-\($0)") }
                let first = ring.append(documents: batch, peer: "N", time: Double(round))
                #expect(first == UInt64(expected.count + 1))
                expected += batch.enumerated().map { (first + UInt64($0.offset), $0.element.documentID) }
                if round % 3 == 0 {
                    let single = ring.append(type: "t", time: 0, data: [:])
                    expected.append((single.sequence, "-"))
                }
                let held = expected.suffix(capacity)
                #expect(ring.count == held.count)
                #expect(ring.lastSequence == UInt64(expected.count))
                for since in 0...UInt64(expected.count) {
                    let (events, missed) = ring.events(after: since)
                    let wanted = held.filter { $0.sequence > since }
                    #expect(events.map(\.sequence) == wanted.map(\.sequence))
                    #expect(events.map { $0.data["doc"] ?? .string("-") } == wanted.map { .string($0.doc) })
                    #expect(missed + UInt64(events.count) == UInt64(expected.count) - since)
                }
            }
        }
    }
}
