import CanopyCore
import CanopySimulation
import CanopyStore
import Foundation
import Testing

/// The simulator with attachments in the workload: content of up to three parts fetched through
/// message loss, resets mid-transfer, crashes and storage faults; after the heal every node must
/// hold every attachment its leaves name (invariant 9). The sweep is `canopy-sim --attachments`.
@Suite("Simulation with attachments")
struct AttachmentSimulationTests {
    static func configuration(_ seed: UInt64) -> SimulationConfiguration {
        var configuration = SimulationConfiguration(seed: seed, documents: 10, faultPhaseSeconds: 30)
        configuration.attachments = true
        return configuration
    }

    @Test("every seed of a short list converges with all attachment content on every node", arguments: Array(UInt64(1)...12))
    func seedHoldsInvariants(seed: UInt64) throws {
        let report = try Simulation(Self.configuration(seed)).run()
        #expect(report.violations.isEmpty, "\(report.failureText)")
    }

    @Test("content damaged on its source for a while, then repaired: the peers fetch it on the connections they have (seed 41 left a revision waiting before sessions looked again)")
    func damagedThenRepairedContentArrives() throws {
        var configuration = SimulationConfiguration(seed: 41)
        configuration.attachments = true
        let report = try Simulation(configuration).run()
        #expect(report.faults["damagedContent", default: 0] > 0, "the seed damages content: \(report.faults)")
        #expect(report.violations.isEmpty, "\(report.failureText)")
    }

    @Test("content removed from one node after quiescence is reported as missing (invariant 9)")
    func plantedMissingContent() throws {
        let simulation = try Simulation(Self.configuration(2))
        final class Planted: @unchecked Sendable { var digest: String? }
        let planted = Planted()
        simulation.beforeChecks = { simulation in
            guard let store = simulation.nodes[1].store else { return }
            // Content a current revision names (the invariant checks what open leaves name).
            let named = try store.changes(since: 0).lazy.compactMap { change -> AttachmentDigest? in
                guard let document = try? store.get(id: change.documentID), !document.isDeleted else { return nil }
                return (try? Attachments.metadata(in: document.body))?.values.map(\.digest).min { $0.hex < $1.hex }
            }.first
            guard let digest = named else { return }
            try FileManager.default.removeItem(atPath: store.attachments.directory + "/" + digest.hex)
            planted.digest = digest.hex
        }
        let report = try simulation.run()
        let digest = try #require(planted.digest)
        #expect(report.violations.contains { $0.invariant == .attachments && $0.nodes == [1] && $0.detail.contains(digest) }, "\(report.failureText)")
    }
}
