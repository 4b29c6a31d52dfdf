/// How far a peer is known to hold this store's changes: every change through `sequence` reached
/// it durably (it said so in a replication checkpoint). Stemming uses the lowest horizon to keep
/// what a peer may still hold as a leaf (`Protocol/design.md` §2.7: stemming never removes what a
/// peer may still hold).
package struct PeerHorizon: Sendable, Equatable {
    /// Who holds the changes: any stable name the caller chooses (replication uses the replication
    /// id of the peer's pull, in hex).
    package let peer: String
    /// The newest sequence of this store the peer holds, with everything before it.
    package let sequence: Int64

    package init(peer: String, sequence: Int64) {
        self.peer = peer
        self.sequence = sequence
    }
}

/// Peer horizons are rows of the `metadata` table keyed `peer_horizon/<peer>`, so they need no
/// table of their own and are read once at open.
enum PeerHorizons {
    static let keyPrefix = "peer_horizon/"

    /// Every horizon in the file.
    static func load(_ db: Database) throws -> [String: Int64] {
        let rows = try db.query(
            "SELECT key, value FROM metadata WHERE key >= ? AND key < ? ORDER BY key",
            [.text(keyPrefix), .text(String(keyPrefix.dropLast()) + "0")]
        ) { row in (String(row.text(0).dropFirst(keyPrefix.count)), row.int64(1)) }
        return Dictionary(rows, uniquingKeysWith: { first, _ in first })
    }

    static func set(_ db: Database, peer: String, sequence: Int64) throws {
        try db.run(
            "INSERT INTO metadata(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            .text(keyPrefix + peer), .integer(sequence))
    }

    static func delete(_ db: Database, peer: String) throws {
        try db.run("DELETE FROM metadata WHERE key = ?", .text(keyPrefix + peer))
    }
}

/// Peer horizons: what stemming keeps for peers that have not caught up.
///
/// The rule (`Protocol/design.md` §2.7) is LiteCore's "remote ancestor" rule at the granularity a checkpoint gives:
/// when a document is written and its previous state (its previous sequence) is at or below every
/// peer's horizon, every peer holds that state, so its leaves — which a peer may still hold as
/// leaves — are kept with the paths from them to the new leaves; when some peer has not reached the
/// previous state, nothing of the document is stemmed, because that peer may hold any older leaf.
/// Without this, a revision stemmed here and offered again by a peer that still holds it as its
/// leaf would come back as an open leaf with no link to its descendants (a phantom conflict that
/// deletes-win can turn into a different winner on this node than on the others).
///
/// The cost is LiteCore's: a peer that stops replicating keeps the history of documents edited
/// since its horizon from being stemmed, until it returns or is forgotten (`forgetPeerHorizon`).
/// With no horizon at all (no peer ever acknowledged a change), stemming is plain `revsLimit`.
extension DocumentStore {
    /// Records that `peer` durably holds every change through `sequence` (clamped to the last
    /// sequence assigned). A horizon only moves forward: an older `sequence` is ignored, since a
    /// peer that lost data comes back as a new database with a new replication id.
    package func recordPeerHorizon(peer: String, sequence: Int64) throws(StoreError) {
        precondition(!peer.isEmpty, "a peer horizon needs a peer name")
        try write { context in
            let clamped = min(max(0, sequence), context.lastSequence)
            if let known = context.peerHorizons[peer], known >= clamped { return }
            try PeerHorizons.set(context.db, peer: peer, sequence: clamped)
            context.horizonChanges[peer] = clamped
        }
    }

    /// Forgets `peer`'s horizon (a peer removed for good), so it no longer holds history back.
    package func forgetPeerHorizon(peer: String) throws(StoreError) {
        try write { context in
            try PeerHorizons.delete(context.db, peer: peer)
            context.horizonChanges[peer] = .some(nil)
        }
    }
}
