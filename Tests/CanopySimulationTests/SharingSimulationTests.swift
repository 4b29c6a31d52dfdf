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
    static func configuration(_ seed: UInt64, faults: FaultLevel? = nil, liars: Int = 0) -> SimulationConfiguration {
        var configuration = SimulationConfiguration(seed: seed, faults: faults, documents: 10, faultPhaseSeconds: 20)
        configuration.databases = 3
        configuration.liars = liars
        return configuration
    }

    /// Topology, fault level, policy (merge, else automatic), revsLimit, batch size and window from the seed.
    static let seeds: [UInt64] = Array(1...8)

    @Test("every seed of the short list keeps every access and convergence invariant", arguments: seeds)
    func seedHoldsInvariants(seed: UInt64) throws {
        let report = try Simulation(Self.configuration(seed)).run()
        #expect(report.violations.isEmpty, "\(report.failureText)")
        #expect(report.writes > 0)
        #expect(report.sharing["pulled", default: 0] > 0, "\(report.summary)")
    }

    @Test("the seeds exercise every right, prefixes, refused attaches and withheld documents")
    func coverage() throws {
        var rights = Set<ShareAccess>()
        var prefixed = 0
        var unshared = 0
        for seed in Self.seeds {
            let configuration = Self.configuration(seed)
            var random = SplitMix64(seed: seed ^ 0x7070_0001)
            let edges = configuration.topology.edges(count: configuration.nodes, averageDegree: configuration.averageDegree, random: &random)
            let table = ShareTable(seed: seed, nodes: configuration.nodes, edges: edges, databases: configuration.databases)
            for edge in edges {
                for (node, peer) in [(edge.a, edge.b), (edge.b, edge.a)] {
                    for database in table.holdings[node] {
                        guard let share = table.share(node, for: peer, database) else { unshared += 1; continue }
                        rights.insert(share.access)
                        if share.prefix != nil { prefixed += 1 }
                    }
                }
            }
        }
        #expect(rights == [.read, .write, .readWrite])
        let configurations = Self.seeds.map { Self.configuration($0) }
        #expect(Set(configurations.map(\.policy)).isSuperset(of: [.automatic, .merge]))
        #expect(Set(configurations.map(\.revsLimit)).count == 2)
        #expect(Set(configurations.map(\.faults)) == Set(FaultLevel.allCases))
        #expect(prefixed > 0 && unshared > 0)
        let report = try Simulation(Self.configuration(3)).run()
        #expect(report.sharing["refusedAttach", default: 0] > 0, "\(report.summary)")
        // Each refused database is kept as a pending offer, once per database and neighbour.
        #expect((1...report.sharing["refusedAttach", default: 0]).contains(report.sharing["pendingOffers", default: 0]), "\(report.summary)")
        #expect(report.sharing["withheld", default: 0] > 0, "\(report.summary)")
        // Both ends of an edge dial: the simultaneous-connect rule closes the connection that loses.
        #expect(report.races["simultaneousConnect", default: 0] > 0, "\(report.summary)")
    }

    @Test("the same seed replays exactly, crashes and torn commits included: same trace hash and figures; another seed differs")
    func replay() throws {
        let first = try Simulation(Self.configuration(8, faults: .high)).run()
        let second = try Simulation(Self.configuration(8, faults: .high)).run()
        #expect(first.traceHash == second.traceHash)
        #expect(first.summary == second.summary)
        #expect(first.faults.values.reduce(0, +) > 3, "\(first.summary)")
        let other = try Simulation(Self.configuration(12, faults: .high)).run()
        #expect(other.traceHash != first.traceHash)
        #expect(first.violations.isEmpty && other.violations.isEmpty, "\(first.failureText)\n\(other.failureText)")
        // What replayed: crashes and restarts, resets, and the links' in-connection faults.
        let faults = first.faults.merging(other.faults, uniquingKeysWith: +)
        for fault in ["crash", "connectionReset", "resetMidBatch", "tornCommit", "ioError"] {
            #expect(faults[fault, default: 0] > 0, "no \(fault) in seeds 8 and 12")
        }
    }

    @Test("a node that serves its peers beyond their subscriptions has what falls outside them refused, and every invariant holds", arguments: liarSeeds)
    func liarIsRefused(seed: UInt64) throws {
        let simulation = try Simulation(Self.configuration(seed, liars: 1))
        #expect(simulation.liars.count == 1)
        let report = try simulation.run()
        #expect(report.violations.isEmpty, "\(report.failureText)")
        #expect(report.sharing["rejected", default: 0] > 0, "\(report.summary)")
        #expect(report.sharing["refusedByPeer", default: 0] > 0, "\(report.summary)")
    }

    /// Seeds whose liar has a peer that subscribes to it with a narrower prefix (faults from the seed).
    static let liarSeeds: [UInt64] = [1, 3, 6, 8]

    @Test("a seed with a liar replays exactly; the same seed without one keeps its trace")
    func liarReplays() throws {
        let first = try Simulation(Self.configuration(6, faults: .high, liars: 1)).run()
        let second = try Simulation(Self.configuration(6, faults: .high, liars: 1)).run()
        #expect(first.traceHash == second.traceHash)
        #expect(first.summary == second.summary)
        #expect(first.sharing["rejected", default: 0] > 0, "\(first.summary)")
        #expect(first.violations.isEmpty, "\(first.failureText)")
        let honest = try Simulation(Self.configuration(6, faults: .high)).run()
        #expect(honest.traceHash != first.traceHash)
        #expect(honest.sharing["rejected", default: 0] == 0, "\(honest.summary)")
    }

    @Test("failed commits, full disks and torn commits in every database's store keep every access and convergence invariant; without storage faults there are none")
    func storageFaultsHoldInvariants() throws {
        var faults: [String: Int] = [:]
        for seed in Self.storageFaultSeeds {
            let report = try Simulation(Self.configuration(seed, faults: .high)).run()
            #expect(report.violations.isEmpty, "\(report.failureText)")
            faults.merge(report.faults, uniquingKeysWith: +)
        }
        for fault in ["ioError", "diskFull", "tornCommit"] { #expect(faults[fault, default: 0] > 0, "no \(fault) in \(faults)") }
        var configuration = Self.configuration(6, faults: .high)
        configuration.storageFaults = false
        let without = try Simulation(configuration).run()
        #expect(without.violations.isEmpty, "\(without.failureText)")
        #expect(without.faults.keys.allSatisfy { !["ioError", "diskFull", "tornCommit"].contains($0) }, "\(without.summary)")
    }

    /// Seeds run at the high fault level for the storage faults.
    static let storageFaultSeeds: [UInt64] = Array(1...6)

    @Test("a node that replicates every database both ways, whatever its shares say, is reported: documents where no share lets them go, revisions stored from peers that may not write them")
    func replicatingBeyondTheSharesIsCaught() throws {
        let simulation = try Simulation(Self.configuration(3))
        simulation.replicationOverride = { node, _, _, configuration in
            guard node == 0 else { return configuration }
            var widened = configuration
            widened.direction = .both
            widened.pushFilter = .all
            widened.pullFilter = .all
            return widened
        }
        let report = try simulation.run()
        #expect(report.violations.contains { $0.invariant == .writeAccess && $0.nodes.last == 0 }, "\(report.failureText)")
        #expect(report.violations.contains { $0.invariant == .readAccess && $0.nodes.first == 0 }, "\(report.failureText)")
        let wellBehaved = try Simulation(Self.configuration(3)).run()
        #expect(wellBehaved.violations.isEmpty, "\(wellBehaved.failureText)")
    }

    @Test("a revision copied by hand to a node no share lets it reach is reported under read access")
    func handCopiedRevisionIsCaught() throws {
        let simulation = try Simulation(Self.configuration(3))
        var planted: (node: Int, write: AcknowledgedWrite)?
        simulation.beforeChecks = { simulation in
            // The first write some node holding its database may not read: copy it there, history and all.
            for write in simulation.writes {
                let reach = simulation.shares.reach(from: [write.node], write.database, write.documentID)
                guard let node = (0..<simulation.configuration.nodes).first(where: {
                    simulation.shares.holds($0, write.database) && !reach.contains($0)
                }) else { continue }
                let source = simulation.stores[write.node][write.database]!
                let target = simulation.stores[node][write.database]!
                let revisions = try source.revisionsToSend([RevisionRequest(documentID: write.documentID, revisions: [write.revision], knownAncestors: [])])
                try target.bulkInsertForeign(revisions)
                planted = (node, write)
                return
            }
        }
        let report = try simulation.run()
        let (node, write) = try #require(planted)
        #expect(report.violations.contains {
            $0.invariant == .readAccess && $0.documentID == write.documentID && $0.nodes.last == node
        }, "\(report.failureText)")
    }

    @Test("a document written on one node after quiescence and never replicated breaks convergence")
    func divergenceIsCaught() throws {
        let simulation = try Simulation(Self.configuration(2))
        var planted: String?
        simulation.beforeChecks = { simulation in
            // A document that flows both ways between two neighbours: change it on one side only.
            for edge in simulation.edges {
                for id in (0..<10).map(simulation.documentID) {
                    for database in simulation.shares.databases where simulation.shares.flows(from: edge.a, to: edge.b, database, id)
                        && simulation.shares.flows(from: edge.b, to: edge.a, database, id) {
                        let store = simulation.stores[edge.a][database]!
                        let current = try? store.get(id: id)
                        try store.put(id: id, body: .object(["planted": .bool(true)]), replacing: current.flatMap { $0.isDeleted ? nil : $0.revision })
                        planted = id
                        return
                    }
                }
            }
        }
        let report = try simulation.run()
        let id = try #require(planted)
        #expect(report.violations.contains { $0.invariant == .convergence && $0.documentID == id }, "\(report.failureText)")
    }

    @Test("a written revision removed from a node the shares let it reach is reported as a lost write")
    func lostWriteIsCaught() throws {
        let simulation = try Simulation(Self.configuration(3))
        var planted: (node: Int, revision: RevisionID)?
        simulation.beforeChecks = { simulation in
            // A revision its writer holds that is no longer a leaf there (removing a leaf would break the tree).
            for write in simulation.writes.reversed() {
                let store = simulation.stores[write.node][write.database]!
                guard let tree = try store.revisionTree(id: write.documentID), tree.contains(write.revision),
                      !tree.isLeaf(write.revision) else { continue }
                let database = try Database(path: simulation.path(write.node, write.database))
                try database.run(
                    "DELETE FROM revisions WHERE doc_key = (SELECT doc_key FROM documents WHERE doc_id = ?) AND generation = ? AND digest = ?",
                    .text(write.documentID), .integer(Int64(write.revision.generation)), .blob(write.revision.digest))
                planted = (write.node, write.revision)
                return
            }
        }
        let report = try simulation.run()
        let (node, revision) = try #require(planted)
        #expect(report.violations.contains { $0.invariant == .lostWrite && $0.nodes.last == node && $0.detail.contains("\(revision)") },
                "\(report.failureText)")
    }
}
