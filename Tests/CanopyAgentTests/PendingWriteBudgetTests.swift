import Testing

@testable import CanopyAgent

@Suite("pending write budget")
struct PendingWriteBudgetTests {
    /// Records which connections the budget cut off.
    final class CutOffs: @unchecked Sendable {
        var names: [String] = []
    }

    @Test("over the total, the connection with the most queued is cut off first, and only as many as needed")
    func slowestIsCutFirst() {
        let cut = CutOffs()
        let budget = PendingWriteBudget(totalMax: 100)
        let owners = (0..<4).map { _ in CutOffs() }
        func update(_ index: Int, _ bytes: Int) {
            budget.update(ObjectIdentifier(owners[index]), bytes: bytes) { cut.names.append("c\(index)") }
        }
        update(0, 10)
        update(1, 40)
        update(2, 30)
        #expect(cut.names.isEmpty)
        #expect(budget.totalBytes == 80)
        update(3, 25)
        #expect(cut.names == ["c1"])
        #expect(budget.totalBytes == 65)
        // A connection that drained reports 0 and no longer counts.
        update(2, 0)
        #expect(budget.totalBytes == 35)
        budget.remove(ObjectIdentifier(owners[3]))
        #expect(budget.totalBytes == 10)
    }

    @Test("streams are cut before connections that only get replies, even ones holding more")
    func streamsAreCutFirst() {
        let cut = CutOffs()
        let owners = (0..<3).map { _ in CutOffs() }
        let budget = PendingWriteBudget(totalMax: 100)
        budget.update(ObjectIdentifier(owners[0]), bytes: 60) { cut.names.append("reply") }
        budget.update(ObjectIdentifier(owners[1]), bytes: 20, streaming: true) { cut.names.append("small stream") }
        budget.update(ObjectIdentifier(owners[2]), bytes: 30, streaming: true) { cut.names.append("large stream") }
        #expect(cut.names == ["large stream"])
        budget.update(ObjectIdentifier(owners[0]), bytes: 90) { cut.names.append("reply") }
        #expect(cut.names == ["large stream", "small stream"])
        budget.update(ObjectIdentifier(owners[0]), bytes: 101) { cut.names.append("reply") }
        #expect(cut.names == ["large stream", "small stream", "reply"])
    }

    @Test("bytes handed to a connection's queue count until the connection takes them")
    func inFlightBytesCount() {
        let cut = CutOffs()
        let owners = (0..<2).map { _ in CutOffs() }
        let budget = PendingWriteBudget(totalMax: 100)
        budget.addInFlight(ObjectIdentifier(owners[0]), 40, streaming: true) { cut.names.append("a") }
        budget.update(ObjectIdentifier(owners[0]), bytes: 30, streaming: true) { cut.names.append("a") }
        #expect(budget.totalBytes == 70)
        budget.addInFlight(ObjectIdentifier(owners[0]), -40, streaming: true) { cut.names.append("a") }
        #expect(budget.totalBytes == 30)
        budget.addInFlight(ObjectIdentifier(owners[1]), 50, streaming: true) { cut.names.append("b") }
        budget.addInFlight(ObjectIdentifier(owners[1]), 30, streaming: true) { cut.names.append("b") }
        #expect(cut.names == ["b"])
        // What the cut connection's queue still takes afterwards is not counted twice.
        budget.addInFlight(ObjectIdentifier(owners[1]), -50, streaming: true) { cut.names.append("b") }
        #expect(budget.totalBytes == 30)
    }

    @Test("one connection alone over the total is cut off")
    func singleConnectionOverTheTotal() {
        let cut = CutOffs()
        let owner = CutOffs()
        let budget = PendingWriteBudget(totalMax: 100) { bytes in cut.names.append("told \(bytes)") }
        budget.update(ObjectIdentifier(owner), bytes: 101) { cut.names.append("cut") }
        #expect(cut.names == ["told 101", "cut"])
        #expect(budget.totalBytes == 0)
    }
}
