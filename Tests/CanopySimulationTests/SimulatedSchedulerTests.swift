import CanopySimulation
import Testing

@Suite("Simulated scheduler")
struct SimulatedSchedulerTests {
    @Test("a run to a deadline runs every item due by then, when a cancelled item sits at the top of the heap")
    func cancelledTopDoesNotHideEarlierWork() {
        let scheduler = SimulatedScheduler()
        let ran = Recorder()
        let first = scheduler.schedule(after: 1) { ran.append(1) }
        scheduler.schedule(after: 10) { ran.append(10) }
        scheduler.schedule(after: 2) { ran.append(2) }
        first.cancel()
        // In the heap's array the item at 10 comes before the one at 2.
        #expect(scheduler.nextTime == 2)
        scheduler.run(deadline: 5)
        #expect(ran.values == [2])
        #expect(scheduler.nextTime == 10)
    }
}

/// Collects what scheduled work did (the scheduler runs it on the test's thread).
private final class Recorder: @unchecked Sendable {
    private(set) var values: [Int] = []
    func append(_ value: Int) { values.append(value) }
}
