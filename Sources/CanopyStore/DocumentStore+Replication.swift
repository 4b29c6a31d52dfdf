import CanopyCore

/// What a store lacks of the revisions a peer offered for one document (`revsDiff`).
package struct RevsDiffEntry: Sendable, Equatable {
    /// The document.
    package let documentID: String
    /// Offered revisions this store does not hold, sorted (oldest first).
    package let missing: [RevisionID]
    /// Open leaves this store holds with a lower generation than some missing revision: the
    /// sender can stop each revision's history there (CouchDB's `possible_ancestors`), newest first.
    package let possibleAncestors: [RevisionID]
}

/// The revisions a peer offers for one document (a `changes` entry's leaves), for `revsDiff`.
package struct RevisionOffer: Sendable, Equatable {
    package let documentID: String
    package let revisions: [RevisionID]

    package init(documentID: String, revisions: [RevisionID]) {
        self.documentID = documentID
        self.revisions = revisions
    }
}

/// A request for the revisions to send a peer for one document.
package struct RevisionRequest: Sendable, Equatable {
    package let documentID: String
    /// The revisions the peer lacks.
    package let revisions: [RevisionID]
    /// Revisions the peer said it has; each history stops at the first one it meets.
    package let knownAncestors: [RevisionID]
    /// The document's `Change.documentKey`, when the request answers this store's changes feed:
    /// its revisions are then read by key, without the lookup by id. A key that finds nothing
    /// (the document was purged since) falls back to the id.
    package let documentKey: Int64?

    package init(documentID: String, revisions: [RevisionID], knownAncestors: [RevisionID], documentKey: Int64? = nil) {
        self.documentID = documentID
        self.revisions = revisions
        self.knownAncestors = knownAncestors
        self.documentKey = documentKey
    }
}

/// The two questions replication asks a store.
extension DocumentStore {
    /// For each document, which of `offered` revisions this store lacks and which of its leaves
    /// could be their ancestors. Documents lacking nothing are left out. Sorted by document id.
    package func revsDiff(_ offered: [String: [RevisionID]]) throws(StoreError) -> [RevsDiffEntry] {
        let sorted = offered.keys.sorted().map { RevisionOffer(documentID: $0, revisions: offered[$0]!) }
        return try revsDiff(inOrder: sorted).compactMap { $0 }
    }

    /// `revsDiff` for documents in the caller's order (a replication batch's, already
    /// deterministic): one answer per offer, at its position, nil where this store lacks nothing.
    /// No dictionary is built and no id sorted — per batch of a pull, hashing and sorting the ids
    /// cost more than the absent-document lookups themselves. An id offered twice is answered twice.
    package func revsDiff(inOrder offers: [RevisionOffer]) throws(StoreError) -> [RevsDiffEntry?] {
        try readSnapshot { db in
            let documents = try RevisionRows.loadLeaves(db, documentIDs: offers.map(\.documentID))
            return try zip(documents, offers).map { try Self.revsDiff($0, $1, db) }
        }
    }

    /// One document's answer: its missing revisions (sorted) and possible ancestors, or nil.
    ///
    /// Answered from the document's leaf list, without reading its tree: an offered revision
    /// that is a leaf is held; one that is not, at a generation no lower than every leaf's, is
    /// not held (every revision a tree holds that is not a leaf has a descendant leaf of a higher
    /// generation); only one below some leaf's generation is looked up, in the revisions index.
    /// The pull of an edit is the second case, so a pull reads no revision row to ask.
    private static func revsDiff(
        _ document: RevisionRows.DocumentLeaves?, _ offer: RevisionOffer, _ db: Database
    ) throws -> RevsDiffEntry? {
        let offered = offer.revisions
        guard let document else {
            // Absent (most documents of an initial replication): everything is missing.
            let missing = offered.count == 1 ? offered : Set(offered).sorted()
            return missing.isEmpty ? nil : RevsDiffEntry(documentID: offer.documentID, missing: missing, possibleAncestors: [])
        }
        let highest = document.leaves.reduce(0) { max($0, $1.revision.generation) }
        var missing: [RevisionID] = []
        for revision in offered.count == 1 ? offered : Set(offered).sorted() {
            if document.leaves.contains(where: { $0.revision == revision }) { continue }
            if revision.generation < highest, try RevisionRows.holdsRevision(db, key: document.key, revision: revision) { continue }
            missing.append(revision)
        }
        guard let newest = missing.last else { return nil }
        let ancestors = document.leaves.filter { !$0.kind.isClosed && $0.revision.generation < newest.generation }
            .map(\.revision).sorted(by: >)
        return RevsDiffEntry(documentID: offer.documentID, missing: missing, possibleAncestors: ancestors)
    }

    /// The revisions to send a peer, ready for its `bulkInsertForeign`: each with its kind,
    /// canonical body and ancestry down to (and including) the first revision the peer has —
    /// however deep, within `knownAncestorReach`, because the peer named it as one of its leaves
    /// and only a history that reaches it links that leaf to the revision (peer horizons keep it
    /// here for that) — else cut after `revsLimit` revisions (default: this store's revsLimit).
    /// Replication passes the wire's maximum for both, so a peer gets every link this store holds
    /// and stems to its own limit. Throws `notFound` for a revision this store lacks and
    /// `bodyUnavailable` for one whose body was compacted away.
    package func revisionsToSend(
        _ requests: [RevisionRequest], revsLimit historyLimit: Int? = nil,
        knownAncestorReach: Int = StoreLimits.revsLimitMax
    ) throws(StoreError) -> [ForeignRevision] {
        let limit = max(1, historyLimit ?? revsLimit)
        let reach = max(limit, knownAncestorReach)
        return try readSnapshot { db in
            var result: [ForeignRevision] = []
            result.reserveCapacity(requests.reduce(0) { $0 + $1.revisions.count })
            let documents = try RevisionRows.loadForSending(db, requests)
            for (request, document) in zip(requests, documents) {
                guard let document else {
                    throw StoreError.notFound(documentID: request.documentID, revision: request.revisions.first)
                }
                let known = Set(request.knownAncestors)
                for revision in request.revisions {
                    result.append(try Self.outgoing(
                        documentID: request.documentID, revision: revision, document: document, known: known,
                        limit: limit, reach: reach))
                }
            }
            return result
        }
    }

    /// One revision to send: its path cut at the first known ancestor within `reach`, else at
    /// `limit`, and its body as stored.
    private static func outgoing(
        documentID: String, revision: RevisionID, document: SendingDocument, known: Set<RevisionID>, limit: Int, reach: Int
    ) throws -> ForeignRevision {
        guard let leaf = document.node(revision) else {
            throw StoreError.notFound(documentID: documentID, revision: revision)
        }
        guard let body = document.body(revision) else {
            throw StoreError.bodyUnavailable(documentID: documentID, revision: revision)
        }
        try verify(body, of: leaf, documentID: documentID, importedID: document.isImported(revision))
        if case .single = document {
            // The document holds this one revision (every document of a first sync of new
            // documents): the path is the leaf alone, with the link to its parent as the rest
            // below makes it, and no ancestry array per document.
            let tail = leaf.parent.map { known.contains($0) ? [$0] : [] } ?? []
            let rootParent = leaf.parent.flatMap { known.contains($0) ? nil : $0 }
            return try foreign(
                documentID: documentID, leaf: leaf, ancestors: tail, rootParent: rootParent, body: body,
                importedID: document.isImported(revision))
        }
        let searched = document.ancestry(of: revision, limit: known.isEmpty ? limit : reach)
        var history: [RevisionID]
        var rootParent: RevisionID?
        if let stop = searched.dropFirst().firstIndex(where: { known.contains($0) }) {
            history = Array(searched[...stop])
        } else {
            history = Array(searched.prefix(limit))
            if let oldest = history.last, let parent = document.node(oldest)?.parent {
                // Cut at `limit`, or where this store stemmed, above a revision we know of: name
                // the link, or the peer would take the oldest revision for a root and, should the
                // parent reach it some other way, the parent for an open leaf
                // (RevisionPath.rootParent). A parent the peer holds travels as the known-ancestor
                // tail.
                if known.contains(parent) { history.append(parent) } else { rootParent = parent }
            }
        }
        return try foreign(
            documentID: documentID, leaf: leaf, ancestors: Array(history.dropFirst()), rootParent: rootParent, body: body,
            importedID: document.isImported(revision))
    }

    /// Checks a body about to be sent against what the store knows of it: a revision's id is the
    /// hash of its parent, kind and body, so a body that no longer hashes to it was damaged in
    /// the file (an imported id is not a hash: its body is checked for canonical form). A
    /// damaged revision is never sent: `StoreError.damaged`, which the read reports.
    private static func verify(_ body: [UInt8], of leaf: RevTree.Node, documentID: String, importedID: Bool) throws(StoreError) {
        let problem: String?
        if importedID || (leaf.parent == nil && leaf.id.generation > 1) {
            problem = CanonicalJSONCheck.problem(in: body).map { "its stored body is not canonical JSON: \($0)" }
        } else if RevisionHasher.revisionID(parent: leaf.parent, kind: leaf.kind, canonicalBody: body) != leaf.id {
            problem = RevisionRows.bodyMismatch
        } else {
            problem = nil
        }
        if let problem { throw .damaged(StoredDamage(documentID: documentID, revision: leaf.id, reason: problem)) }
    }

    /// The foreign revision of `leaf` with its ancestry; a history the store holds that does not
    /// make a valid path is corruption.
    private static func foreign(
        documentID: String, leaf: RevTree.Node, ancestors: [RevisionID], rootParent: RevisionID?, body: [UInt8],
        importedID: Bool
    ) throws(StoreError) -> ForeignRevision {
        do {
            let path = try RevisionPath(leaf: leaf.id, kind: leaf.kind, ancestors: ancestors, rootParent: rootParent)
            return ForeignRevision(documentID: documentID, path: path, body: .canonical(body), importedID: importedID)
        } catch {
            throw .corrupt(detail: "stored history of \"\(documentID.prefix(80))\": \(error)")
        }
    }
}
