import CanopyCore
import CanopyReplication

/// What a node lets one peer do to its copy of one database, as the agent's `[share DB NODE-ID]`
/// says it: `read` (the node serves the peer's subscriptions: it pushes), `write` (the node
/// subscribes to the peer and stores what it sends: it pulls), or both, optionally only for ids
/// with a prefix.
public struct Share: Sendable, Equatable, CustomStringConvertible {
    /// The rights.
    public enum Rights: String, Sendable, CaseIterable {
        case read, write, readWrite = "read-write"

        /// The peer may read this node's copy (this node pushes).
        public var read: Bool { self != .write }
        /// The peer may write this node's copy (this node pulls).
        public var write: Bool { self != .read }
    }

    public var rights: Rights
    /// Only ids with this prefix (nil: every id).
    public var prefix: String?

    public init(_ rights: Rights, prefix: String? = nil) {
        self.rights = rights
        self.prefix = prefix
    }

    /// Whether the share covers `documentID`.
    public func covers(_ documentID: String) -> Bool { prefix.map(documentID.hasPrefix) ?? true }

    /// How the node replicates the database with the peer under this share: the direction from
    /// the rights, and the prefix as the filter of each direction it runs.
    public func replication(_ base: ReplicationConfiguration) -> ReplicationConfiguration {
        var configuration = base
        configuration.direction = rights == .readWrite ? .both : (rights == .read ? .push : .pull)
        let filter = prefix.map(ReplicationFilter.idPrefix) ?? .all
        configuration.pushFilter = rights.read ? filter : .all
        configuration.pullFilter = rights.write ? filter : .all
        return configuration
    }

    public var description: String { rights.rawValue + (prefix.map { " " + $0 } ?? "") }
}

/// Which databases each node of a multi-database run holds, and what each node lets each
/// neighbour do to each of them (`Share`), drawn from the seed.
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
    /// `shares[node][peer][database]`: nil when the node does not share the database with the peer.
    private let shares: [[Int: [DatabaseName: Share]]]
    /// The neighbours of each node.
    private let neighbours: [Set<Int>]

    /// The id prefixes shares may be limited to (the workload's ids use them).
    public static let prefixes = ["a-", "b-"]

    /// The table of a run with `count` databases over `edges` of `nodes` nodes.
    public init(seed: UInt64, nodes: Int, edges: [Edge], databases count: Int) {
        databases = [DatabaseName.default] + (1..<max(1, count)).map { DatabaseName(validating: "db\($0)")! }
        var random = SplitMix64(seed: seed ^ 0x5AAE_0009)
        var holdings: [[DatabaseName]] = []
        for _ in 0..<nodes {
            holdings.append(databases.filter { $0 == .default || !random.chance(1, in: 4) })
        }
        var shares = [[Int: [DatabaseName: Share]]](repeating: [:], count: nodes)
        var neighbours = [Set<Int>](repeating: [], count: nodes)
        for edge in edges {
            neighbours[edge.a].insert(edge.b)
            neighbours[edge.b].insert(edge.a)
            for (node, peer) in [(edge.a, edge.b), (edge.b, edge.a)] {
                var table: [DatabaseName: Share] = [:]
                for database in holdings[node] {
                    let rights = random.index(below: 10)
                    let prefix = random.index(below: 4)
                    guard rights >= 2 else { continue }  // not shared with this peer
                    table[database] = Share(
                        rights < 4 ? .read : (rights < 6 ? .write : .readWrite), prefix: prefix < 2 ? nil : Self.prefixes[prefix - 2])
                }
                shares[node][peer] = table
            }
        }
        self.holdings = holdings
        self.shares = shares
        self.neighbours = neighbours
    }

    /// Whether `node` holds `database`.
    public func holds(_ node: Int, _ database: DatabaseName) -> Bool { holdings[node].contains(database) }

    /// What `node` lets `peer` do to its copy of `database` (nil: not shared with it).
    public func share(_ node: Int, for peer: Int, _ database: DatabaseName) -> Share? { shares[node][peer]?[database] }

    /// The databases `node` shares with `peer`, sorted.
    public func shared(_ node: Int, with peer: Int) -> [DatabaseName] { (shares[node][peer] ?? [:]).keys.sorted() }

    /// Whether a revision of `documentID` in `database` may move from `from` to its neighbour `to`.
    public func flows(from: Int, to: Int, _ database: DatabaseName, _ documentID: String) -> Bool {
        guard neighbours[from].contains(to), let serving = share(from, for: to, database), let pulling = share(to, for: from, database) else {
            return false
        }
        return serving.rights.read && serving.covers(documentID) && pulling.rights.write && pulling.covers(documentID)
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
        shares.indices.flatMap { node in
            (shares[node].keys.sorted()).map { peer in
                let list = shared(node, with: peer).map { "\($0):\(share(node, for: peer, $0)!)" }
                return "n\(node)->n\(peer) holds [\(holdings[node].map(\.text).joined(separator: ","))] shares [\(list.joined(separator: " "))]"
            }
        }
    }
}
