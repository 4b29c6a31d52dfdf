import CanopyCore
import CanopyCrypto
import CanopyReplication
import CanopyStore
import Testing

@testable import CanopySimulation

/// The checks themselves: a run replays exactly, and each planted violation is reported, so a
/// clean seed list means something.
@Suite("Simulation checks")
struct SimulationCheckTests {
    /// A run with many faults of every kind.
    static func faulty(_ seed: UInt64, policy: SimulationPolicy = .merge) -> SimulationConfiguration {
        SimulationConfiguration(seed: seed, nodes: 4, topology: .random, faults: .high, policy: policy,
                                documents: 10, faultPhaseSeconds: 30, revsLimit: 1000)
    }

    /// Runs `configuration` and expects every invariant to hold.
    static func expectClean(_ configuration: SimulationConfiguration) throws {
        let report = try Simulation(configuration).run()
        #expect(report.violations.isEmpty, "\(report.failureText)")
    }

    @Test("the same seed gives the same trace hash and the same figures twice, through worker races and storage faults")
    func replay() throws {
        let first = try Simulation(Self.faulty(12)).run()
        let second = try Simulation(Self.faulty(12)).run()
        #expect(first.traceHash == second.traceHash)
        #expect(first.summary == second.summary)
        #expect(first.faults.values.reduce(0, +) > 5)
        let other = try Simulation(Self.faulty(13)).run()
        #expect(other.traceHash != first.traceHash)
        #expect(first.violations.isEmpty, "\(first.failureText)")
        #expect(other.violations.isEmpty, "\(other.failureText)")
        // What replayed: completions out of order, both ends dialling, and every storage fault.
        #expect(first.races["reordered", default: 0] > 0)
        #expect(first.races["simultaneousConnect", default: 0] > 0)
        let faults = first.faults.merging(other.faults, uniquingKeysWith: +)
        for fault in ["ioError", "diskFull", "tornCommit"] {
            #expect(faults[fault, default: 0] > 0, "no \(fault) in seeds 12 and 13")
        }
    }

    @Test("the inline worker still runs: no work overlaps, and the invariants hold")
    func inlineWorker() throws {
        var configuration = Self.faulty(12)
        configuration.worker = .inline
        let report = try Simulation(configuration).run()
        #expect(report.violations.isEmpty, "\(report.failureText)")
        #expect(report.races["overlapped"] == 0 && report.races["reordered"] == 0)
        #expect(configuration.commandLine.contains("--inline-worker"))
    }

    @Test("both ends of an edge dial, and both keep the connection whose initiator has the larger node id")
    func simultaneousConnect() throws {
        let simulation = try Simulation(SimulationConfiguration(
            seed: 5, nodes: 2, topology: .pair, faults: FaultLevel.none, policy: .automatic, documents: 4, faultPhaseSeconds: 5))
        let report = try simulation.run()
        #expect(report.violations.isEmpty, "\(report.failureText)")
        #expect(report.races["simultaneousConnect", default: 0] > 0)
        let ids = simulation.network.nodeIDs
        let larger = ids[0] > ids[1] ? 0 : 1
        let kept = try #require(simulation.nodes[0].connection(to: 1))
        #expect(simulation.nodes[1].connection(to: 0) == kept)
        #expect(kept.initiator == ids[larger])
    }

    @Test("tracing a document does not change the trace hash and prints its history")
    func tracingIsTransparent() throws {
        var traced = Self.faulty(12)
        traced.traceDocument = "doc-001"
        let plain = try Simulation(Self.faulty(12)).run()
        let report = try Simulation(traced).run()
        #expect(report.traceHash == plain.traceHash)
        #expect(report.documentLines.contains { $0.contains("wrote doc-001") })
        #expect(report.documentLines.contains { $0.contains("send") && $0.contains("changes") })
    }

    @Test("a revision row deleted from one node after quiescence is reported as a lost write")
    func plantedLostWrite() throws {
        let simulation = try Simulation(Self.faulty(21))
        final class Planted: @unchecked Sendable { var revision: RevisionID? }
        let planted = Planted()
        simulation.beforeChecks = { simulation in
            let node = simulation.nodes[2]
            guard let store = node.store else { return }
            // An acknowledged revision that is no longer a leaf (deleting a leaf would break the tree).
            for write in simulation.writes.reversed() where !write.isDeletion {
                guard let tree = try store.revisionTree(id: write.documentID), tree.contains(write.revision),
                      !tree.isLeaf(write.revision) else { continue }
                let database = try Database(path: node.path)
                try database.run(
                    "DELETE FROM revisions WHERE doc_key = (SELECT doc_key FROM documents WHERE doc_id = ?) AND generation = ? AND digest = ?",
                    .text(write.documentID), .integer(Int64(write.revision.generation)), .blob(write.revision.digest))
                #expect(database.changes == 1)
                planted.revision = write.revision
                return
            }
        }
        let report = try simulation.run()
        let revision = try #require(planted.revision)
        #expect(report.violations.contains { $0.invariant == .lostWrite && $0.nodes.last == 2 && $0.detail.contains("\(revision)") })
        #expect(report.failureText.contains("swift run -c release canopy-sim --seed 21"))
    }

    @Test("a local edit on one node after quiescence is reported as a divergence")
    func plantedDivergence() throws {
        let simulation = try Simulation(Self.faulty(22))
        simulation.beforeChecks = { simulation in
            _ = try simulation.nodes[1].store?.put(id: "planted", body: .object(["x": .int(1)]), replacing: nil)
        }
        let report = try simulation.run()
        #expect(report.violations.contains { $0.invariant == .convergence && $0.documentID == "planted" })
    }

    @Test("a planted divergence also shows in the digests: the two nodes' digests differ while their other neighbours agree")
    func plantedDivergenceChangesTheDigest() throws {
        let simulation = try Simulation(Self.faulty(22))
        simulation.beforeChecks = { simulation in
            _ = try simulation.nodes[1].store?.put(id: "planted", body: .object(["x": .int(1)]), replacing: nil)
        }
        let report = try simulation.run()
        // The views differ, and so do the digests: no digest violation; node 1's digest is its own.
        #expect(!report.violations.contains { $0.invariant == .digests }, "\(report.failureText)")
        let digests = simulation.nodes.map { $0.store!.digest }
        #expect(digests[1] != digests[0] && digests[0] == digests[2])
    }

    @Test("a digest bucket changed in one node's file after quiescence is reported (invariant 10)")
    func plantedDigestDamage() throws {
        let simulation = try Simulation(Self.faulty(21))
        simulation.beforeChecks = { simulation in
            let file = try Database(path: simulation.nodes[2].path)
            try file.run("UPDATE digest_buckets SET digest = zeroblob(32) WHERE bucket = (SELECT min(bucket) FROM digest_buckets)")
        }
        let report = try simulation.run()
        #expect(report.violations.contains { $0.invariant == .digests && $0.nodes == [2] }, "\(report.failureText)")
    }

    @Test("a checkpoint moved ahead of the data it covers is reported")
    func plantedCheckpointAhead() throws {
        let simulation = try Simulation(Self.faulty(23))
        simulation.beforeChecks = { simulation in
            // The source gets a new document; the target's checkpoint claims it already has it.
            let edge = simulation.edges[0]
            guard let source = simulation.nodes[edge.a].store, let target = simulation.nodes[edge.b].store else { return }
            try source.put(id: "unsent", body: .object(["x": .int(1)]), replacing: nil)
            let id = ReplicationIdentity.checkpointDocumentID(ReplicationIdentity.replicationID(
                source: source.databaseIDBytes, target: target.databaseIDBytes, filter: .all))
            let stored = try #require(try target.localGet(id))
            let checkpoint = try #require(ReplicationCheckpoint(encoded: CanonicalJSON.encode(stored)))
            let ahead = checkpoint.recording(session: checkpoint.current.session, sequence: UInt64(source.lastSequence))
            try target.localPut(id, body: try JSONValue.parse(ahead.encoded()))
        }
        let report = try simulation.run()
        #expect(report.violations.contains { $0.invariant == .checkpoint && $0.documentID == "unsent" })
    }

    @Test("a resolver that refuses everything and is never fixed leaves conflicts: kept and flagged, then reported")
    func plantedUnsettledConflicts() throws {
        let simulation = try Simulation(Self.faulty(31, policy: .throwing))
        simulation.breakResolver()
        simulation.healFixesResolver = false
        let report = try simulation.run()
        #expect(!simulation.resolutionFailures.isEmpty)
        let conflicts = report.violations.filter { $0.invariant == .conflicts }
        #expect(!conflicts.isEmpty)
        // Kept, never dropped: every conflicted tree was still flagged for the retry pass.
        #expect(conflicts.allSatisfy { $0.detail.contains("still conflicted after settling") })
    }

    @Test("a live branch slipped in beside a standing deletion is reported: deletions stay deleted")
    func plantedRevival() throws {
        final class Planted: @unchecked Sendable { var documentID: String? }
        let planted = Planted()
        let simulation = try Simulation(Self.faulty(24, policy: .automatic))
        simulation.beforeChecks = { simulation in
            let node = simulation.nodes[0]
            guard let store = node.store else { return }
            for write in simulation.writes where write.isDeletion {
                guard let tree = try store.revisionTree(id: write.documentID), tree.current?.id == write.revision else { continue }
                // A second handle on the same file whose policy keeps the conflict it creates.
                let manual = try DocumentStore(path: node.path, configuration: .init(conflictPolicy: .manual))
                let body: JSONValue = .object(["planted": .bool(true)])
                let revision = RevisionHasher.revisionID(parent: nil, kind: .live, body: body)
                _ = try manual.bulkInsertForeign([ForeignRevision(
                    documentID: write.documentID, path: try RevisionPath(leaf: revision, kind: .live), body: .value(body))])
                planted.documentID = write.documentID
                return
            }
        }
        let report = try simulation.run()
        let id = try #require(planted.documentID, "seed 24 left no document deleted on n0")
        #expect(report.violations.contains { $0.invariant == .deletion && $0.documentID == id && $0.nodes.last == 0 })
    }

    /// Regression for an engine bug the simulator found (fixed in the store's
    /// `revisionsToSend`): a revived document reached a peer through a path cut just short of the
    /// deletion the peer held, and never converged.
    @Test("a revived document converges with a tiny revsLimit (seed 2099, revsLimit 4)")
    func revivedDocumentWithTinyRevsLimit() throws {
        try Self.expectClean(SimulationConfiguration(
            seed: 2099, nodes: 5, topology: .line, faults: .high, policy: .merge, documents: 4,
            faultPhaseSeconds: 40, revsLimit: 4, batchSize: 3, window: 8))
    }

    /// A regression seed: a document was deleted, then edited on top of its deletion more times
    /// than the revs limit keeps. Nodes that stemmed the deletion away got it back as a leaf of its
    /// own beside the live branch, and the automatic rule (deletes win) closed the live branch:
    /// the document the nodes kept editing read as deleted everywhere, and the nodes disagreed on
    /// the open leaves. A deletion below where a live leaf's history was stemmed no longer wins.
    @Test("an old deletion that came back after stemming does not delete the document the nodes kept editing (seed 1446, revsLimit 12)")
    func stemmedDeletionComesBack() throws {
        var configuration = SimulationConfiguration(
            seed: 1446, nodes: 5, topology: .ring, faults: .high, policy: .throwing, documents: 12,
            faultPhaseSeconds: 40, revsLimit: 12, batchSize: 3, window: 8)
        configuration.attachments = true
        try Self.expectClean(configuration)
    }

    /// A regression seed: with the minimum revsLimit, a revision arrived only as the oldest element
    /// of a path cut at revsLimit, its parent arrived later by another way, and the two were never
    /// linked — the nodes disagreed on the open leaves for good. Paths now carry the cut link
    /// (`RevisionPath.rootParent`, §6.6 of the protocol).
    @Test("documents converge with the minimum revsLimit, seed 3145 included", arguments: [UInt64(3145), 3146, 3147, 3148])
    func minimumRevsLimit(seed: UInt64) throws {
        let configuration = SimulationConfiguration(
            seed: seed, nodes: 4, topology: .ring, faults: .low, policy: .merge, documents: 3,
            faultPhaseSeconds: 40, revsLimit: 2, batchSize: 3, window: 8)
        let report = try Simulation(configuration).run()
        #expect(report.violations.isEmpty, "\(report.failureText)")
    }
    /// A regression seed of the concurrent worker: a `revisions` message from n0 still waited for
    /// n1's writer when n0's `checkpointSet`, sent after it, moved n0's peer horizon on n1; n1
    /// stemmed a revision that the waiting write then inserted again, as an open leaf no other
    /// node had (horizons now wait for the revisions received before them: `PeerHorizonBarrier`).
    @Test("documents converge when checkpoint copies overtake the writes of earlier revisions (seed 220, revsLimit 2)")
    func horizonOvertakingWrites() throws {
        try Self.expectClean(SimulationConfiguration(
            seed: 220, nodes: 4, topology: .ring, faults: .high, policy: .throwing, documents: 3,
            faultPhaseSeconds: 40, revsLimit: 2, batchSize: 3, window: 8))
    }

    /// Regression seeds at the minimum revsLimit with heavy faults (the node count is the seed's).
    /// 5173: a node stemmed a deletion a peer still held as its leaf; offered again, it came back
    /// as an open deletion, won, and closed the branch every other node held (peer horizons now
    /// keep what a peer may hold). 5066 and 5206: a history cut at the peer's revsLimit left a gap
    /// that an older leaf, arriving later, could not cross (sources now send every link they hold).
    /// 5156 failed with peer horizons alone, before peers that never synced were pinned too.
    @Test("documents converge with the minimum revsLimit under heavy faults", arguments: [
        (UInt64(5066), 4), (5156, 3), (5173, 5), (5206, 4),
    ])
    func minimumRevsLimitHeavyFaults(seed: UInt64, nodes: Int) throws {
        let configuration = SimulationConfiguration(
            seed: seed, nodes: nodes, topology: .ring, faults: .high, policy: .merge, documents: 3,
            faultPhaseSeconds: 40, revsLimit: 2, batchSize: 3, window: 8)
        let report = try Simulation(configuration).run()
        #expect(report.violations.isEmpty, "\(report.failureText)")
    }
}
