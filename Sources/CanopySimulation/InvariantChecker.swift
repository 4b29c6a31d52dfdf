import CanopyCore
import CanopyReplication
import CanopyStore

/// Checks the invariants of `Protocol/design.md` §7.2 against the nodes' stores, reading them the way an
/// application would (changes feed, revision trees, local documents). Every check is written so
/// that it can fail: `SimulationTests` plants violations and expects them to be reported.
struct InvariantChecker {
    let simulation: Simulation

    private var nodes: [SimulationNode] { simulation.nodes }
    private var revsLimit: Int { simulation.configuration.revsLimit }

    /// One node's view of one document: current revision, open leaves (sorted), the tree.
    struct DocumentView: Equatable {
        let current: RevisionID
        let open: [RevisionID]
        let currentIsDeleted: Bool
    }

    // MARK: Before the heal

    /// Invariant 5 (throwing resolver): a conflict the resolver could not settle is kept and
    /// flagged for the retry pass, never dropped; and invariant 4 for every running node.
    func checkBeforeHeal() throws -> [Violation] {
        var violations: [Violation] = []
        if simulation.configuration.policy == .throwing {
            for node in nodes {
                guard let store = node.store else { continue }
                let flagged = Set(try store.conflictedDocumentIDs())
                for change in try allChanges(store) {
                    let conflicted = try store.revisionTree(id: change.documentID)?.isConflicted ?? false
                    if conflicted != flagged.contains(change.documentID) {
                        violations.append(Violation(
                            invariant: .conflicts, documentID: change.documentID, nodes: [node.index],
                            detail: conflicted ? "tree is conflicted but the document is not flagged (the conflict would be dropped)"
                                : "document flagged conflicted but its tree is not"))
                    }
                }
            }
        }
        for node in nodes where node.store != nil {
            violations += try checkCheckpoints(involving: node.index)
        }
        return violations
    }

    // MARK: After settling

    /// Invariants 1, 10, 2, 3, 5 and 4 on the settled nodes.
    func checkAfterSettling() throws -> [Violation] {
        var views: [[String: DocumentView]] = []
        for node in nodes {
            guard let store = node.store else { return [Violation(invariant: .convergence, documentID: nil, nodes: [node.index], detail: "node is down after the heal")] }
            var view: [String: DocumentView] = [:]
            for change in try allChanges(store) {
                let open = change.leaves.filter { !$0.kind.isClosed }.map(\.revision).sorted()
                view[change.documentID] = DocumentView(current: change.current, open: open, currentIsDeleted: change.deleted)
            }
            views.append(view)
        }
        var violations = convergence(views)
        violations += try digests(views.map { [DatabaseName.default: $0] }, stores: nodes.map(\.stores))
        violations += try lostWrites()
        violations += try deletions(views)
        violations += try conflicts()
        for node in nodes { violations += try checkCheckpoints(involving: node.index) }
        if simulation.configuration.attachments { violations += try attachmentContent() }
        return violations
    }

    /// Invariant 9: no revision still waits for content, and every open leaf's attachments are
    /// on the node, whole, hashing to their digests.
    private func attachmentContent() throws -> [Violation] {
        var violations: [Violation] = []
        for node in nodes {
            guard let store = node.store else { continue }
            let waiting = try store.awaitingContentCount()
            if waiting > 0 {
                violations.append(Violation(
                    invariant: .attachments, documentID: nil, nodes: [node.index], detail: "\(waiting) revisions still wait for content after the heal"))
            }
            var verified = Set<AttachmentDigest>()
            for change in try allChanges(store) {
                for leaf in change.leaves where !leaf.kind.isClosed {
                    let body = try store.get(id: change.documentID, rev: leaf.revision).body
                    for (name, stub) in (try? Attachments.metadata(in: body)) ?? [:] where !verified.contains(stub.digest) {
                        if try contentMatches(stub, in: store.attachments) {
                            verified.insert(stub.digest)
                        } else {
                            violations.append(Violation(
                                invariant: .attachments, documentID: change.documentID, nodes: [node.index],
                                detail: "\(leaf.revision) names attachment \(name) (\(stub.digest), \(stub.length) bytes), which is missing or damaged"))
                        }
                    }
                }
            }
        }
        return violations
    }

    private func contentMatches(_ stub: AttachmentMetadata, in attachments: AttachmentStore) throws -> Bool {
        guard attachments.contains(stub.digest, length: stub.length) else { return false }
        do {
            try attachments.read(stub.digest) { _ in }
            return true
        } catch {
            return false
        }
    }

    /// Invariant 1: every node has the same current revision and open leaves for every document.
    private func convergence(_ views: [[String: DocumentView]]) -> [Violation] {
        var violations: [Violation] = []
        let ids = Set(views.flatMap(\.keys)).sorted()
        for id in ids {
            let reference = views[0][id]
            for index in views.indices.dropFirst() where views[index][id] != reference {
                violations.append(Violation(
                    invariant: .convergence, documentID: id, nodes: [0, index],
                    detail: "n0 has \(describe(reference)), n\(index) has \(describe(views[index][id]))"))
            }
        }
        return violations
    }

    private func describe(_ view: DocumentView?) -> String {
        guard let view else { return "nothing" }
        return "current \(view.current) open [\(view.open.map(\.description).joined(separator: ","))]"
    }

    /// Invariant 2: every acknowledged revision is in every node's tree, or was stemmed.
    private func lostWrites() throws -> [Violation] {
        var violations: [Violation] = []
        var trees: [Int: [String: RevTree]] = [:]
        for write in simulation.writes {
            for node in nodes {
                guard let store = node.store else { continue }
                let tree: RevTree
                if let cached = trees[node.index]?[write.documentID] {
                    tree = cached
                } else {
                    tree = try store.revisionTree(id: write.documentID) ?? RevTree()
                    trees[node.index, default: [:]][write.documentID] = tree
                }
                if tree.contains(write.revision) || wasStemmed(write.revision, from: tree) { continue }
                violations.append(Violation(
                    invariant: .lostWrite, documentID: write.documentID, nodes: [write.node, node.index],
                    detail: "revision \(write.revision) written on n\(write.node) at \(SimulationTrace.format(write.time)) is missing on n\(node.index)"))
            }
        }
        return violations
    }

    /// A revision absent from a tree may have been stemmed: some leaf is at least `revsLimit`
    /// generations newer, so the revision lies beyond what every branch through it keeps.
    private func wasStemmed(_ revision: RevisionID, from tree: RevTree) -> Bool {
        tree.leaves.contains { $0.id.generation - revision.generation >= revsLimit }
    }

    /// Invariant 3: an acknowledged deletion that is still an open leaf (nobody revived it by
    /// writing on it, no resolution superseded it) wins: the document is deleted everywhere.
    /// Under rules, a conflict a node's rules leave to manual is kept as it is, its open deletion
    /// included, until someone resolves it.
    private func deletions(_ views: [[String: DocumentView]]) throws -> [Violation] {
        var violations: [Violation] = []
        for node in nodes {
            guard let store = node.store else { continue }
            var checked = simulation.hasResolvers ? try simulation.manualConflicts(on: node.index) : []
            for write in simulation.writes where write.isDeletion && !checked.contains(write.documentID) {
                guard let tree = try store.revisionTree(id: write.documentID), tree.isLeaf(write.revision),
                      let view = views[node.index][write.documentID], !view.currentIsDeleted else { continue }
                checked.insert(write.documentID)
                violations.append(Violation(
                    invariant: .deletion, documentID: write.documentID, nodes: [write.node, node.index],
                    detail: "deletion \(write.revision) from n\(write.node) is an open leaf on n\(node.index) but the current revision \(view.current) is live"))
            }
            violations += try deletionsClosedWithoutCause(node, store)
        }
        return violations
    }

    /// Under the automatic rule a deletion loses a conflict only to a higher deletion, so an
    /// acknowledged deletion with a closing tombstone as child needs a higher deletion in the tree.
    /// (Skipped when stemming may have removed that deletion, or cut a live branch's history
    /// above it: such a deletion may be that branch's ancestor, and loses to it.)
    private func deletionsClosedWithoutCause(_ node: SimulationNode, _ store: DocumentStore) throws -> [Violation] {
        guard simulation.configuration.policy == .automatic, revsLimit >= 1000 else { return [] }
        var violations: [Violation] = []
        for write in simulation.writes where write.isDeletion {
            guard let tree = try store.revisionTree(id: write.documentID) else { continue }
            let nodes = tree.sortedNodes
            let closed = nodes.contains { $0.parent == write.revision && $0.kind.isClosed }
            let outranked = nodes.contains { $0.kind.isDeleted && !$0.kind.isClosed && $0.id > write.revision }
            if closed && !outranked {
                violations.append(Violation(
                    invariant: .deletion, documentID: write.documentID, nodes: [write.node, node.index],
                    detail: "deletion \(write.revision) was closed on n\(node.index) though no deletion outranks it"))
            }
        }
        return violations
    }

    /// Invariant 5 after settling: no node is left with a conflicted document (automatic and
    /// merge settle on receipt; the fixed flaky resolver and the manual passes settle the rest;
    /// under rules, resolvers connected for good and the built-in strategies settle all but what
    /// the node's rules leave to manual).
    private func conflicts() throws -> [Violation] {
        var violations: [Violation] = []
        if simulation.hasResolvers {
            for node in nodes {
                for (id, strategy) in try simulation.unsettledConflicts(on: node.index) {
                    violations.append(Violation(invariant: .conflicts, documentID: id, nodes: [node.index],
                                                detail: "still conflicted after settling, under \(strategy)"))
                }
            }
            return violations
        }
        for node in nodes {
            guard let store = node.store else { continue }
            for id in try store.conflictedDocumentIDs() {
                violations.append(Violation(invariant: .conflicts, documentID: id, nodes: [node.index],
                                            detail: "still conflicted after settling under policy \(simulation.configuration.policy.rawValue)"))
            }
        }
        return violations
    }

    // MARK: Checkpoints

    /// Invariant 4 for every replication into and out of `node` whose both ends are up: the
    /// checkpoint a target keeps (and the copy its source keeps) names a source sequence Q; every
    /// document whose source sequence is ≤ Q has not changed since the batch that reached Q was
    /// read, so the target must hold all of its leaves (or have stemmed them, or set them aside
    /// until their attachment content arrives).
    /// (Runs of several databases replicate each with the filters its shares give, and are
    /// checked by `SharingChecker` instead.)
    func checkCheckpoints(involving node: Int) throws -> [Violation] {
        guard !simulation.isMultiDatabase else { return [] }
        var violations: [Violation] = []
        for peer in nodes[node].peers {
            for (source, target) in [(peer, node), (node, peer)] {
                guard let sourceStore = nodes[source].store, let targetStore = nodes[target].store else { continue }
                let replicationID = ReplicationIdentity.replicationID(
                    source: sourceStore.databaseIDBytes, target: targetStore.databaseIDBytes, filter: .all)
                // The target's own checkpoint, and the copy the source keeps for the target.
                let documentIDs = [
                    ReplicationIdentity.checkpointDocumentID(replicationID),
                    ReplicationIdentity.peerCheckpointDocumentID(peer: PeerReplicator.peerHorizonKey("n\(target)"), replicationID),
                ]
                for (holder, store, documentID) in [(target, targetStore, documentIDs[0]), (source, sourceStore, documentIDs[1])] {
                    guard let json = try store.localGet(documentID),
                          let checkpoint = ReplicationCheckpoint(encoded: CanonicalJSON.encode(json)) else { continue }
                    if let problem = try firstMissing(upTo: checkpoint.current.sequence, source: sourceStore, target: targetStore) {
                        violations.append(Violation(
                            invariant: .checkpoint, documentID: problem.0, nodes: [source, target],
                            detail: "checkpoint n\(source)->n\(target) kept on n\(holder) is at source sequence \(checkpoint.current.sequence) but n\(target) lacks \(problem.1)"))
                    }
                }
            }
        }
        return violations
    }

    private func firstMissing(upTo sequence: UInt64, source: DocumentStore, target: DocumentStore) throws -> (String, RevisionID)? {
        let covered = try allChanges(source).filter { $0.sequence <= Int64(clamping: sequence) }
        guard !covered.isEmpty else { return nil }
        var offered: [String: [RevisionID]] = [:]
        for change in covered { offered[change.documentID] = change.leaves.map(\.revision) }
        for entry in try target.revsDiff(offered).sorted(by: { $0.documentID < $1.documentID }) {
            let tree = try target.revisionTree(id: entry.documentID) ?? RevTree()
            // A revision set aside until its attachment content arrives is durable on the
            // target: the checkpoint may pass it.
            let setAside = Set(try target.setAsideRevisions(of: entry.documentID))
            if let missing = entry.missing.sorted().first(where: { !wasStemmed($0, from: tree) && !setAside.contains($0) }) {
                return (entry.documentID, missing)
            }
        }
        return nil
    }
}

/// Invariant 10 over every database: two nodes whose views of a database are the same (same
/// documents, current revisions and open leaves) have the same digest of it, two whose views
/// differ have different ones, and each store's digest buckets are what its rows give (the full
/// check, `checkRows`).
func digests(_ views: [[DatabaseName: [String: InvariantChecker.DocumentView]]], stores: [[DatabaseName: DocumentStore]]) throws -> [Violation] {
    var violations: [Violation] = []
    for (node, byDatabase) in stores.enumerated() {
        for (database, store) in byDatabase.sorted(by: { $0.key < $1.key }) {
            let differing = try store.checkRows().differingDigestBuckets
            if differing > 0 {
                violations.append(Violation(
                    invariant: .digests, documentID: nil, nodes: [node],
                    detail: "\(database): \(differing) digest buckets disagree with the document rows"))
            }
        }
    }
    for a in stores.indices {
        for b in stores.indices where b > a {
            for (database, storeA) in stores[a].sorted(by: { $0.key < $1.key }) {
                guard let storeB = stores[b][database], let viewA = views[a][database], let viewB = views[b][database] else { continue }
                let sameViews = viewA == viewB
                guard sameViews != (storeA.digest == storeB.digest) else { continue }
                violations.append(Violation(
                    invariant: .digests, documentID: nil, nodes: [a, b],
                    detail: "\(database): the nodes hold \(sameViews ? "the same" : "different") documents but their digests are "
                        + "\(storeA.digest.hex.prefix(16)) and \(storeB.digest.hex.prefix(16))"))
            }
        }
    }
    return violations
}

/// Every document's latest change in `store`, read page by page as an application would.
func allChanges(_ store: DocumentStore) throws -> [Change] {
    var all: [Change] = []
    var since: Int64 = 0
    while true {
        let page = try store.changesPage(since: since, limit: 1000)
        all += page.changes
        guard let last = page.lastSequence else { return all }
        since = last
    }
}
