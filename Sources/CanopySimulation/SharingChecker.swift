import CanopyCore
import CanopyStore

/// The invariants of a multi-database run (`Simulation` with several databases), checked on the settled stores
/// against the share table (what the nodes were configured to allow, whatever they actually ran):
///
/// 7  read access: a revision a node's application wrote in database D is held by another node
///    only if that node is reachable from a writer of it along flow edges for its id
///    (`ShareTable.flows`: N serves M — N's share for M grants read and covers the id — and M
///    pulls from N — M's share for N grants write and covers the id).
/// 8  write access: every revision a replicator stored came from a peer with a flow edge to the
///    node for its id (checked as the replicators report `pulled`, in `Simulation`).
/// 2  no acknowledged write lost: a revision a node's application wrote is in the tree of its
///    writer and of every node reachable from it along flow edges for its id, or stemmed there.
/// 10 digests: nodes whose copies of a database hold the same documents and open leaves have
///    equal digests of it, and every digest is what its rows give.
/// 1  convergence: for every flow edge N → M of a database both hold and every document N
///    holds, every open leaf of N is in M's tree (or stemmed there): downstream holds the same
///    revision or a newer one; where the edge runs both ways, both hold the same current
///    revision and open leaves.
struct SharingChecker {
    let simulation: Simulation
    /// Written revisions that the shares kept from a node holding their database (so read access
    /// was put to the test); set by `check`.
    private(set) var withheld = 0

    init(simulation: Simulation) {
        self.simulation = simulation
    }

    private var shares: ShareTable { simulation.shares }

    /// Invariants 7, 2, 1 and 10.
    mutating func check() throws -> [Violation] {
        var views: [[DatabaseName: [String: InvariantChecker.DocumentView]]] = []
        for stores in simulation.stores {
            var byDatabase: [DatabaseName: [String: InvariantChecker.DocumentView]] = [:]
            for (database, store) in stores {
                var view: [String: InvariantChecker.DocumentView] = [:]
                for change in try allChanges(store) {
                    let open = change.leaves.filter { !$0.kind.isClosed }.map(\.revision).sorted()
                    view[change.documentID] = .init(current: change.current, open: open, currentIsDeleted: change.deleted)
                }
                byDatabase[database] = view
            }
            views.append(byDatabase)
        }
        return try access() + convergence(views) + digests(views, stores: simulation.stores)
    }

    private func tree(_ node: Int, _ database: DatabaseName, _ id: String) throws -> RevTree {
        try simulation.stores[node][database]?.revisionTree(id: id) ?? RevTree()
    }

    /// A revision absent from a tree may have been stemmed: some leaf is at least `revsLimit`
    /// generations newer.
    private func wasStemmed(_ revision: RevisionID, from tree: RevTree) -> Bool {
        tree.leaves.contains { $0.id.generation - revision.generation >= simulation.configuration.revsLimit }
    }

    /// Invariants 7 (held only where the shares let it go) and 2 (held everywhere they do).
    private mutating func access() throws -> [Violation] {
        var writers: [RevisionID: Set<Int>] = [:]
        for write in simulation.writes { writers[write.revision, default: []].insert(write.node) }
        var violations: [Violation] = []
        var checked = Set<String>()
        for write in simulation.writes {
            let key = "\(write.database) \(write.documentID) \(write.revision)"
            guard checked.insert(key).inserted else { continue }
            let sources = writers[write.revision]!
            let reach = shares.reach(from: sources, write.database, write.documentID)
            for node in 0..<simulation.configuration.nodes where shares.holds(node, write.database) {
                let tree = try tree(node, write.database, write.documentID)
                if reach.contains(node) {
                    if !tree.contains(write.revision) && !wasStemmed(write.revision, from: tree) {
                        violations.append(Violation(
                            invariant: .lostWrite, documentID: write.documentID, nodes: [write.node, node],
                            detail: "\(write.database): revision \(write.revision) written on n\(write.node) is missing on n\(node), which the shares let it reach"))
                    }
                    continue
                }
                withheld += 1
                guard tree.contains(write.revision) else { continue }
                violations.append(Violation(
                    invariant: .readAccess, documentID: write.documentID, nodes: sources.sorted() + [node],
                    detail: "\(write.database): revision \(write.revision) written on n\(write.node) is on n\(node), "
                        + "which no chain of shares lets read it (reachable: \(reach.sorted().map { "n\($0)" }.joined(separator: ",")))"))
            }
        }
        return violations
    }

    /// Invariant 1 along the flow edges.
    private func convergence(_ views: [[DatabaseName: [String: InvariantChecker.DocumentView]]]) throws -> [Violation] {
        var violations: [Violation] = []
        for database in shares.databases {
            for edge in simulation.edges where shares.holds(edge.a, database) && shares.holds(edge.b, database) {
                let ids = Set(views[edge.a][database]!.keys).union(views[edge.b][database]!.keys).sorted()
                for id in ids {
                    let forward = shares.flows(from: edge.a, to: edge.b, database, id)
                    let backward = shares.flows(from: edge.b, to: edge.a, database, id)
                    let (viewA, viewB) = (views[edge.a][database]![id], views[edge.b][database]![id])
                    if forward && backward {
                        if viewA != viewB {
                            violations.append(Violation(
                                invariant: .convergence, documentID: id, nodes: [edge.a, edge.b],
                                detail: "\(database) flows both ways: n\(edge.a) has \(describe(viewA)), n\(edge.b) has \(describe(viewB))"))
                        }
                        continue
                    }
                    for (from, to, view) in [(edge.a, edge.b, viewA), (edge.b, edge.a, viewB)] {
                        guard let view, from == edge.a ? forward : backward else { continue }
                        let downstream = try tree(to, database, id)
                        if let missing = view.open.first(where: { !downstream.contains($0) && !wasStemmed($0, from: downstream) }) {
                            violations.append(Violation(
                                invariant: .convergence, documentID: id, nodes: [from, to],
                                detail: "\(database) flows n\(from) -> n\(to): leaf \(missing) of n\(from) is missing on n\(to)"))
                        }
                    }
                }
            }
        }
        return violations
    }

    private func describe(_ view: InvariantChecker.DocumentView?) -> String {
        guard let view else { return "nothing" }
        return "current \(view.current) open [\(view.open.map(\.description).joined(separator: ","))]"
    }
}
