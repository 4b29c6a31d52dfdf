import CanopySimulation
import Testing

/// The fixed seed list: each seed picks its topology (pair, line, ring, mesh, random), policy
/// (automatic, merge, throwing, manual), fault level, revsLimit, batch size and window from the seed, runs a 30 s
/// fault phase with 3–5 nodes and 10 documents, heals, settles and checks every invariant.
/// Longer and larger runs are `canopy-sim`'s job.
@Suite("Simulation seeds")
struct SimulationSeedTests {
    static let seeds: [UInt64] = Array(1...104)

    static func configuration(_ seed: UInt64) -> SimulationConfiguration {
        SimulationConfiguration(seed: seed, documents: 10, faultPhaseSeconds: 30)
    }

    @Test("every seed of the fixed list converges with no invariant violated", arguments: seeds)
    func seedHoldsInvariants(seed: UInt64) throws {
        let report = try Simulation(Self.configuration(seed)).run()
        #expect(report.violations.isEmpty, "\(report.failureText)")
        #expect(report.writes > 0)
    }

    @Test("the seed list covers every topology, policy and fault level")
    func coverage() {
        let configurations = Self.seeds.map(Self.configuration)
        #expect(Set(configurations.map(\.topology)) == Set(SimulationTopology.allCases))
        #expect(Set(configurations.map(\.policy)) == Set(SimulationPolicy.allCases))
        #expect(Set(configurations.map(\.faults)) == Set(FaultLevel.allCases))
        #expect(Set(configurations.map(\.revsLimit)).count == 2)
        #expect(Set(configurations.map(\.batchSize)).count == 3)
        #expect(Set(configurations.map(\.window)).count == 3)
    }
}
