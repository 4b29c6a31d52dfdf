import CanopyCore
import CanopyReplication

/// Which databases each node holds and what each node lets each neighbour do to each of them:
/// one `Sharing` per node, the rights model the agent runs, with the peers named `n0`, `n1`, …
/// as the simulation's links name them. A run of one database shares `default` read-write with
/// every neighbour, as agents do after `peer add` on both sides; with more, the holdings and
/// rights are drawn from the seed.
///
/// Document flow: a revision of database D moves from node N to its neighbour M only when N's
/// share of D for M grants read and covers the id (N serves M) and M's share of D for N grants
/// write and covers the id (M pulls from N). Both sides' configurations must agree; a share one
/// side has and the other lacks opens nothing (the side without one refuses the attach).
public struct ShareTable: Sendable {
    /// The databases of the run: `default`, then `db1`, `db2`, ….
    public let databases: [DatabaseName]
    /// The databases each node holds, sorted (every node holds `default`).
    public let holdings: [[DatabaseName]]
    /// What each node lets its peers do (`Sharing`), peers named by `name(of:)`.
    public let sharing: [Sharing]
    /// The neighbours of each node.
    private let neighbours: [Set<Int>]

    /// The id prefixes shares may be limited to (the workload's ids use them).
    public static let prefixes = ["a-", "b-"]

    /// The table of a run with `count` databases over `edges` of `nodes` nodes.
    public init(seed: UInt64, nodes: Int, edges: [Edge], databases count: Int) {
        databases = [DatabaseName.default] + (1..<max(1, count)).map { DatabaseName(validating: "db\($0)")! }
        var neighbours = [Set<Int>](repeating: [], count: nodes)
        for edge in edges {
            neighbours[edge.a].insert(edge.b)
            neighbours[edge.b].insert(edge.a)
        }
        self.neighbours = neighbours
        guard count > 1 else {
            holdings = Array(repeating: [.default], count: nodes)
            sharing = neighbours.map { peers in
                Sharing(shares: [], defaultDirections: Dictionary(uniqueKeysWithValues: peers.map { (Self.name(of: $0), .both) }))
            }
            return
        }
        var random = SplitMix64(seed: seed ^ 0x5AAE_0009)
        var holdings: [[DatabaseName]] = []
        for _ in 0..<nodes {
            holdings.append(databases.filter { $0 == .default || !random.chance(1, in: 4) })
        }
        var shares = [[Share]](repeating: [], count: nodes)
        for edge in edges {
            for (node, peer) in [(edge.a, edge.b), (edge.b, edge.a)] {
                for database in holdings[node] {
                    let rights = random.index(below: 10)
                    let prefix = random.index(below: 4)
                    guard rights >= 2 else { continue }  // not shared with this peer
                    shares[node].append(Share(
                        database: database, nodeID: Self.name(of: peer), access: rights < 4 ? .read : (rights < 6 ? .write : .readWrite),
                        prefix: prefix < 2 ? nil : Self.prefixes[prefix - 2]))
                }
            }
        }
        self.holdings = holdings
        self.sharing = shares.map { Sharing(shares: $0, defaultDirections: [:]) }
    }

    /// Whether `node` holds `database`.
    public func holds(_ node: Int, _ database: DatabaseName) -> Bool { holdings[node].contains(database) }

    /// The name node `node` has as a peer (its links' and replicators' `peerName`).
    public static func name(of node: Int) -> String { "n\(node)" }

    /// What `node` lets `peer` do to its copy of `database` (nil: not shared with it).
    public func share(_ node: Int, for peer: Int, _ database: DatabaseName) -> Share? {
        sharing[node].share(of: database, with: Self.name(of: peer))
    }

    /// The databases `node` shares with `peer`, sorted.
    public func shared(_ node: Int, with peer: Int) -> [DatabaseName] {
        sharing[node].shares(with: Self.name(of: peer), among: holdings[node]).map(\.database).sorted()
    }

    /// Whether a revision of `documentID` in `database` may move from `from` to its neighbour `to`:
    /// `from` may send it to `to`, and `to` may take it from `from`.
    public func flows(from: Int, to: Int, _ database: DatabaseName, _ documentID: String) -> Bool {
        neighbours[from].contains(to) && sharing[from].maySend(documentID, of: database, to: Self.name(of: to))
            && sharing[to].mayAccept(documentID, of: database, from: Self.name(of: from))
    }

    /// The nodes a revision of `documentID` in `database` written on any of `sources` may reach
    /// (the sources included).
    public func reach(from sources: Set<Int>, _ database: DatabaseName, _ documentID: String) -> Set<Int> {
        var reached = sources
        var frontier = sources.sorted()
        while let node = frontier.popLast() {
            for peer in neighbours[node].sorted() where !reached.contains(peer) && flows(from: node, to: peer, database, documentID) {
                reached.insert(peer)
                frontier.append(peer)
            }
        }
        return reached
    }

    /// One line per node and peer for the trace: `n0->n1 default:read-write db1:write b-`.
    public var lines: [String] {
        sharing.indices.flatMap { node in
            neighbours[node].sorted().map { peer in
                let list = shared(node, with: peer).map { "\($0):\(share(node, for: peer, $0)!)" }
                return "n\(node)->n\(peer) holds [\(holdings[node].map(\.text).joined(separator: ","))] shares [\(list.joined(separator: " "))]"
            }
        }
    }
}
