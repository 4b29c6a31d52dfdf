import CanopyCore

/// The `rules` policy's per-node configuration: which rule covers which documents, and the
/// documents the workload writes so that every rule has conflicts to settle.
///
///     to-sim     id prefix `res-`       resolver sim (the node's simulated resolver client)
///     notes      body `type` = `note`   merge-json
///     wins       id prefix `win-`       remote-wins or local-wins, drawn per node
///     catch-all                         automatic, merge-json or manual, drawn per node
///
/// Half the seeds give every node node 0's draws; the other half let the nodes disagree (one
/// keeps what another replaces), which the store's rule against endless exchanges must settle.
/// Document ids under this policy cycle through the prefixes `res-`, `typ-`, `res-`, `win-`,
/// `res-`, `doc-` (half of them for the resolver, the three hot documents included); a
/// `typ-` document's body says `type: note` three times in four (`memo` otherwise, which no rule
/// matches), so the field rule sees leaves that disagree about it.
enum SimulationRules {
    /// The resolver name the rules route to, and that every node's client registers.
    static let resolverName = "sim"

    /// The id prefixes, by document number modulo their count.
    static let prefixes = ["res-", "typ-", "res-", "win-", "res-", "doc-"]

    /// Each node's rules, drawn from `seed`.
    static func draw(seed: UInt64, nodes: Int) -> [ResolutionRules] {
        var random = SplitMix64(seed: seed ^ 0x5E5E_0008)
        let agree = random.chance(1, in: 2)
        var drawn: [ResolutionRules] = []
        for _ in 0..<nodes {
            let wins: ResolutionStrategy = random.chance(1, in: 2) ? .remoteWins : .localWins
            let fallback = [ResolutionStrategy.automatic, .automatic, .mergeJSON, .manual][random.index(below: 4)]
            drawn.append(ResolutionRules([
                ResolutionRule(name: "to-sim", idPrefix: "res-", strategy: .resolver(resolverName)),
                ResolutionRule(name: "notes", fieldValue: "note", strategy: .mergeJSON),
                ResolutionRule(name: "wins", idPrefix: "win-", strategy: wins),
            ], fallback: fallback))
        }
        return agree ? Array(repeating: drawn[0], count: nodes) : drawn
    }

    /// A short description of the nodes' rules for the trace and the report: each node's
    /// `wins` strategy and catch-all.
    static func describe(_ rules: [ResolutionRules]) -> String {
        rules.enumerated().map { index, rules in
            "n\(index):\(rules.rules.last!.strategy)/\(rules.fallback)"
        }.joined(separator: " ")
    }
}
