import CanopyCore
import CanopyReplication
import CanopyStore
import Testing

@testable import CanopySimulation

/// Several databases per node, shared with mixed rights (read, write, read-write, a prefix, or
/// not at all) over one connection per neighbour pair: no document reaches a node that may not
/// read it, no revision is stored from a peer that may not write it, and every database
/// converges along the ways its shares let documents flow.
@Suite("Simulation of several databases with mixed rights")
struct SharingSimulationTests {
    static func configuration(_ seed: UInt64, faults: FaultLevel? = nil) -> SimulationConfiguration {
        var configuration = SimulationConfiguration(
            seed: seed, faults: faults, policy: .automatic, documents: 10, faultPhaseSeconds: 20, revsLimit: 1000)
        configuration.databases = 3
        return configuration
    }

    static let seeds: [UInt64] = [1, 2, 3, 4, 5, 6]

    @Test("every seed of the short list keeps every access and convergence invariant", arguments: seeds)
    func seedHoldsInvariants(seed: UInt64) throws {
        let report = try SharingSimulation(Self.configuration(seed)).run()
        #expect(report.violations.isEmpty, "\(report.failureText)")
        #expect(report.writes > 0)
        #expect(report.sharing["pulled", default: 0] > 0, "\(report.summary)")
    }
}
