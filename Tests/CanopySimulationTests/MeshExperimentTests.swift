import CanopySimulation
import Testing

@Suite("Mesh propagation experiment")
struct MeshExperimentTests {
    @Test("every change written in a 20-node random mesh reaches every node, with hops counted along the way")
    func smallMesh() throws {
        let experiment = try MeshExperiment(seed: 3, nodes: 20, degree: 4, latencySeconds: 0.005, changes: 12)
        let result = try experiment.run()
        #expect(result.allReached)
        #expect(result.propagations.count == 12)
        // At least one hop (every change leaves its node), and never more hops than nodes - 1.
        #expect(result.propagations.allSatisfy { (1...19).contains($0.hops) })
        // A hop costs at least one link delay.
        #expect(result.propagations.allSatisfy { $0.seconds >= 0.005 * Double($0.hops) })
    }
}
