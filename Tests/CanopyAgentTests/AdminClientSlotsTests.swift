import Testing

@testable import CanopyAgent

@Suite("admin connection slots")
struct AdminClientSlotsTests {
    let slots = AdminClientSlots(generalMax: 3, operatorMax: 1)

    private func client(_ id: UInt64, idleSince: Double?, operatorOnly: Bool = false) -> AdminClientSlots.Candidate {
        AdminClientSlots.Candidate(id: id, operatorOnly: operatorOnly, idleSince: idleSince)
    }

    @Test("a free general slot is taken first, even when idle clients are connected")
    func freeSlotFirst() {
        #expect(slots.admission([client(0, idleSince: 1), client(1, idleSince: 2)]) == .admit(operatorOnly: false, closing: []))
    }

    @Test("with every general slot taken, the clients idle the longest come first, ties to the earlier connection, busy ones never")
    func idleLongestMakesRoom() {
        let clients = [client(0, idleSince: 5), client(1, idleSince: nil), client(2, idleSince: 2), client(3, idleSince: 5, operatorOnly: true)]
        #expect(slots.admission(clients) == .admit(operatorOnly: false, closing: [2, 0]))
        let tied = [client(4, idleSince: 1), client(3, idleSince: 1), client(5, idleSince: nil)]
        #expect(slots.admission(tied) == .admit(operatorOnly: false, closing: [3, 4]))
    }

    @Test("with every general slot busy, a newcomer takes an operator slot, then an idle one's, and is refused only when all are busy")
    func operatorSlots() {
        let busy = [client(0, idleSince: nil), client(1, idleSince: nil), client(2, idleSince: nil)]
        #expect(slots.admission(busy) == .admit(operatorOnly: true, closing: []))
        #expect(slots.admission(busy + [client(3, idleSince: 4, operatorOnly: true)]) == .admit(operatorOnly: true, closing: [3]))
        #expect(slots.admission(busy + [client(3, idleSince: nil, operatorOnly: true)]) == .refuse)
    }

    @Test("a claimed client starts no work and is never claimed twice; a streaming or busy one is never claimed")
    func claims() {
        let idle = AdminClientActivity(now: 1)
        #expect(idle.idleSinceSeconds == 1)
        #expect(idle.claim())
        #expect(!idle.claim())
        #expect(!idle.beginWork())
        #expect(idle.idleSinceSeconds == nil)

        let working = AdminClientActivity(now: 1)
        #expect(working.beginWork())
        #expect(!working.claim())
        working.settle(holdsWork: true, now: 2)
        #expect(!working.claim())
        working.settle(holdsWork: false, now: 3)
        #expect(working.idleSinceSeconds == 3)
        #expect(working.claim())

        let streaming = AdminClientActivity(now: 1)
        streaming.startStreaming()
        #expect(streaming.idleSinceSeconds == nil)
        #expect(!streaming.claim())
    }
}
