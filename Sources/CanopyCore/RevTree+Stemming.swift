extension RevTree {
    /// Stems the tree: every leaf keeps itself and at most `limit - 1` ancestors; revisions that
    /// are too far from every leaf are removed. A revision in `keeping` (for example the last
    /// revision a peer is known to have) is kept together with the whole path from it to the leaf,
    /// so the peer's next diff still finds a common ancestor.
    ///
    /// Returns the removed revision ids, sorted. Children of removed revisions keep their parent
    /// id: the link is a fact even when the parent is gone.
    @discardableResult
    public mutating func stem(limit: Int, keeping: Set<RevisionID> = []) -> [RevisionID] {
        precondition(limit >= 1, "revsLimit must be at least 1")
        guard count > limit else { return [] }
        var kept = Set<RevisionID>()
        for leaf in leaves {
            let chain = ancestry(of: leaf.id)
            let pinnedDepth = chain.lastIndex { keeping.contains($0) }.map { $0 + 1 } ?? 0
            for id in chain.prefix(Swift.max(limit, pinnedDepth)) { kept.insert(id) }
        }
        let removed = sortedNodes.map(\.id).filter { !kept.contains($0) }
        for id in removed { remove(id) }
        return removed
    }
}
