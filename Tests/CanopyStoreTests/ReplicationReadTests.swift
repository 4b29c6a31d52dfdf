import CanopyCore
import Testing
@testable import CanopyStore

/// `revsDiff` answers from each document's leaf list and the revisions index, and
/// `revisionsToSend` reads each document with one joined statement (tree and wanted bodies in one
/// scan). These tests compare them with the general path — the document
/// loaded with `RevisionRows.load` and each body read on its own — over seeded random stores with
/// conflicts, deletions, closed leaves, stemmed trees, cut paths, compacted bodies and absent
/// documents.
@Suite("Replication reads")
struct ReplicationReadTests {
    /// Fills a store (revsLimit 4, manual conflicts) with random local edits, deletions and
    /// foreign paths over `ids` (from 4 seeds, so paths of different peers share ancestors), compacting once half-way. Writes that the store refuses are
    /// skipped: they are part of the randomness.
    private func randomStore(_ ids: [String], _ random: inout SplitMix64) throws -> TestStore {
        let test = try TestStore(.init(revsLimit: 4, conflictPolicy: .manual))
        let store = test.store
        for step in 0..<400 {
            if step == 200 { try store.compact() }
            // Now and then the automatic rule settles what is conflicted: closed leaves.
            if step % 97 == 96 { _ = try store.retryConflictResolution(policy: .automatic) }
            let id = ids[Int(random.next() % UInt64(ids.count))]
            let current = try store.revisionTree(id: id)?.current
            switch random.next() % 4 {
            case 0: _ = try? store.bulkInsertForeign([randomForeign(id, chainLengths: 1...6, seeds: 4, &random)])
            case 1 where current?.kind == .live: _ = try? store.delete(id: id, rev: current!.id)
            default:
                let replacing = current?.kind == .live ? current?.id : nil
                _ = try? store.put(id: id, body: body(step), replacing: replacing)
            }
        }
        return test
    }

    /// Revisions the store holds for `id` and a few it never saw, in random order.
    private func offered(_ store: DocumentStore, _ id: String, _ random: inout SplitMix64) throws -> [RevisionID] {
        let held = try store.revisionTree(id: id)?.sortedNodes.map(\.id) ?? []
        let unknown = chain(3, seed: "u\(random.next() % 3)").map(\.id)
        return (held + unknown).filter { _ in random.next() % 3 != 0 }.shuffled(using: &random)
    }

    /// The general path of `revsDiff`.
    private func generalRevsDiff(_ store: DocumentStore, _ offered: [String: [RevisionID]]) throws -> [RevsDiffEntry] {
        try store.readBatch { db in
            try offered.keys.sorted().compactMap { id in
                let tree = try RevisionRows.load(db, documentID: id)?.tree ?? RevTree()
                let missing = Set(offered[id] ?? []).filter { !tree.contains($0) }.sorted()
                guard let newest = missing.last else { return nil }
                let ancestors = tree.openLeaves.filter { $0.id.generation < newest.generation }.map(\.id).sorted(by: >)
                return RevsDiffEntry(documentID: id, missing: missing, possibleAncestors: ancestors)
            }
        }
    }

    /// The general path of `revisionsToSend`, each result spelled out (or the error): the whole
    /// document loaded as for a write, each body read on its own, the history from `RevTree`.
    private func generalSend(_ store: DocumentStore, _ requests: [RevisionRequest], limit: Int) -> String {
        spell {
            try store.readBatch { db in
                try requests.flatMap { request in
                    guard let document = try RevisionRows.load(db, documentID: request.documentID) else {
                        throw StoreError.notFound(documentID: request.documentID, revision: request.revisions.first)
                    }
                    return try request.revisions.map { revision in
                        try generalOutgoing(db, document, revision, known: Set(request.knownAncestors), limit: limit)
                    }
                }
            }
        }
    }

    /// One revision as the general path sends it.
    private func generalOutgoing(
        _ db: Database, _ document: StoredDocument, _ revision: RevisionID, known: Set<RevisionID>, limit: Int
    ) throws -> ForeignRevision {
        let tree = document.tree
        guard let leaf = tree.node(revision) else { throw StoreError.notFound(documentID: document.id, revision: revision) }
        guard let body = try RevisionRows.body(db, of: document, revision: revision) else {
            throw StoreError.bodyUnavailable(documentID: document.id, revision: revision)
        }
        // A known ancestor is reached however deep it is; otherwise the history is cut at `limit`
        // and names the link below the cut.
        var history = tree.ancestry(of: revision)
        var rootParent: RevisionID?
        if let stop = history.dropFirst().firstIndex(where: known.contains) {
            history.removeSubrange((stop + 1)...)
        } else {
            history = Array(history.prefix(limit))
            if let parent = history.last.flatMap({ tree.node($0)?.parent }) {
                if known.contains(parent) { history.append(parent) } else { rootParent = parent }
            }
        }
        let path = try RevisionPath(leaf: revision, kind: leaf.kind, ancestors: Array(history.dropFirst()), rootParent: rootParent)
        return ForeignRevision(documentID: document.id, path: path, body: .canonical(body))
    }

    /// The revisions, or the error, as text that compares equal exactly when they are equal.
    private func spell(_ send: () throws -> [ForeignRevision]) -> String {
        do {
            return try send().map { revision in
                guard case .canonical(let bytes) = revision.body else { return "not canonical" }
                return "\(revision.documentID) \(revision.path) \(bytes)"
            }.joined(separator: "\n")
        } catch {
            return "error: \(error)"
        }
    }

    @Test("a single-revision document cut above its parent sends the link, as the general path does")
    func singleRevisionWithParent() throws {
        let test = try TestStore()
        let links = chain(2, seed: "cut")
        let path = try RevisionPath(leaf: links[0].id, kind: .live, ancestors: [], rootParent: links[1].id)
        try test.store.bulkInsertForeign([ForeignRevision(documentID: "d", path: path, body: .value(links[0].body))])
        for known in [[], [links[1].id]] {
            let request = RevisionRequest(documentID: "d", revisions: [links[0].id], knownAncestors: known)
            let sent = spell { try test.store.revisionsToSend([request]) }
            #expect(sent == generalSend(test.store, [request], limit: 1000))
            let expected = try RevisionPath(
                leaf: links[0].id, kind: .live, ancestors: known, rootParent: known.isEmpty ? links[1].id : nil)
            #expect(try test.store.revisionsToSend([request]).first?.path == expected)
        }
    }

    @Test("revsDiff gives the general path's entries over random stores", arguments: [11, 12, 13, 14, 15])
    func revsDiffMatchesGeneralPath(seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        let ids = (0..<30).map { "d\($0)" }
        let test = try randomStore(ids, &random)
        for _ in 0..<10 {
            var offer: [String: [RevisionID]] = [:]
            for id in ids + ["absent1", "absent2"] where random.next() % 2 == 0 {
                offer[id] = try offered(test.store, id, &random)
            }
            #expect(try test.store.revsDiff(offer) == generalRevsDiff(test.store, offer))
        }
    }

    @Test("revsDiff in the caller's order answers every offer at its position as the general path does", arguments: [16, 17, 18])
    func revsDiffInOrderMatchesSortedForm(seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        let ids = (0..<30).map { "d\($0)" }
        let test = try randomStore(ids, &random)
        for _ in 0..<10 {
            var offers: [RevisionOffer] = []
            // Reverse order of ids, so the answers cannot line up by sorting alone.
            for id in (ids + ["absent1", "absent2"]).reversed() where random.next() % 2 == 0 {
                offers.append(RevisionOffer(documentID: id, revisions: try offered(test.store, id, &random)))
            }
            let sorted = try generalRevsDiff(test.store, Dictionary(uniqueKeysWithValues: offers.map { ($0.documentID, $0.revisions) }))
            let answers = try test.store.revsDiff(inOrder: offers)
            #expect(answers.count == offers.count)
            for (offer, answer) in zip(offers, answers) {
                #expect(answer?.documentID ?? offer.documentID == offer.documentID)
                #expect(answer == sorted.first { $0.documentID == offer.documentID })
            }
        }
    }

    /// Ids the batched reads must carry through JSON text: quotes, backslashes, control
    /// characters, U+0000 (which SQLite's JSON decoding would cut short, naming "nul" instead),
    /// and characters outside ASCII.
    private static let awkwardIDs = ["nul", "nul\u{0}", "\u{0}", "q\"uote", "back\\slash", "tab\tline\n", "\u{1}\u{1F}", "ünï😀", "\\u0041", "A"]

    @Test("batched reads answer ids that JSON must escape, and repeated ids, as the general path does", arguments: [31, 32])
    func awkwardIDsMatchGeneralPath(seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        let ids = Self.awkwardIDs
        let test = try randomStore(ids, &random)
        let offered = ids + ["absent", "nul\u{0}absent"]
        var offers: [RevisionOffer] = []
        for id in offered + offered.reversed() {
            offers.append(RevisionOffer(documentID: id, revisions: try self.offered(test.store, id, &random)))
        }
        let expected = try generalRevsDiff(test.store, Dictionary(offers.map { ($0.documentID, $0.revisions) }) { first, _ in first })
        let answers = try test.store.revsDiff(inOrder: offers)
        #expect(answers.count == offers.count)
        for (position, (offer, answer)) in zip(offers, answers).enumerated() where position < offered.count {
            #expect(answer == expected.first { $0.documentID == offer.documentID })
        }
        var requests: [RevisionRequest] = []
        for id in ids + ids {
            for revision in try test.store.revisionTree(id: id)?.sortedNodes.map(\.id) ?? [] {
                requests.append(RevisionRequest(documentID: id, revisions: [revision], knownAncestors: []))
            }
        }
        #expect(requests.count > ids.count * 2)
        let answerable = requests.filter { request in generalSend(test.store, [request], limit: 4).hasPrefix("error") == false }
        #expect(!answerable.isEmpty)
        #expect(spell { try test.store.revisionsToSend(answerable, revsLimit: 4) } == generalSend(test.store, answerable, limit: 4))
        for id in ["absent", "nul\u{0}absent", "nu"] {
            let missing = RevisionRequest(documentID: id, revisions: [chain(1, seed: id)[0].id], knownAncestors: [])
            #expect(spell { try test.store.revisionsToSend(answerable + [missing]) } == "error: \(StoreError.notFound(documentID: id, revision: missing.revisions[0]))")
        }
    }

    @Test("revisionsToSend by the changes feed's document keys answers as the general path; a key that finds nothing falls back to the id", arguments: [41, 42])
    func documentKeysMatchGeneralPath(seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        let ids = (0..<30).map { "d\($0)" }
        let test = try randomStore(ids, &random)
        let changes = try test.store.changes(since: 0)
        #expect(Set(changes.map(\.documentKey)).count == changes.count)
        var keyed: [RevisionRequest] = []
        var plain: [RevisionRequest] = []
        for change in changes {
            for revision in try test.store.revisionTree(id: change.documentID)?.sortedNodes.map(\.id) ?? [] {
                // Every third request carries a key no document has (as after a purge).
                let key = keyed.count % 3 == 2 ? Int64.max - Int64(keyed.count) : change.documentKey
                keyed.append(RevisionRequest(documentID: change.documentID, revisions: [revision], knownAncestors: [], documentKey: key))
                plain.append(RevisionRequest(documentID: change.documentID, revisions: [revision], knownAncestors: []))
            }
        }
        let answerable = zip(keyed, plain).filter { generalSend(test.store, [$0.1], limit: 4).hasPrefix("error") == false }
        #expect(answerable.count > ids.count)
        #expect(spell { try test.store.revisionsToSend(answerable.map(\.0), revsLimit: 4) }
            == generalSend(test.store, answerable.map(\.1), limit: 4))
        // Keyed and unkeyed requests mixed in one batch, in their order.
        let mixed = answerable.enumerated().map { $0.offset % 2 == 0 ? $0.element.0 : $0.element.1 }
        #expect(spell { try test.store.revisionsToSend(mixed, revsLimit: 4) } == generalSend(test.store, answerable.map(\.1), limit: 4))
    }

    @Test("revisionsToSend gives the general path's revisions and errors over random stores", arguments: [21, 22, 23, 24, 25])
    func revisionsToSendMatchesGeneralPath(seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        let ids = (0..<30).map { "d\($0)" }
        let test = try randomStore(ids, &random)
        var outcomes = Set<String>()
        for id in ids + ["absent"] {
            for limit in [1, 2, 4] {
                let held = try test.store.revisionTree(id: id)?.sortedNodes.map(\.id) ?? []
                // Known ancestors among the revisions held and the parents they name (a stemmed or
                // cut tree names parents it does not hold: the link travels as the known tail).
                let parents = try test.store.revisionTree(id: id)?.sortedNodes.compactMap(\.parent) ?? []
                let known = (held + parents).filter { _ in random.next() % 3 == 0 }
                let requests = try [RevisionRequest(documentID: id, revisions: offered(test.store, id, &random), knownAncestors: known)]
                    + held.map { RevisionRequest(documentID: id, revisions: [$0], knownAncestors: known) }
                for request in requests {
                    let fast = spell { try test.store.revisionsToSend([request], revsLimit: limit) }
                    #expect(fast == generalSend(test.store, [request], limit: limit))
                    outcomes.insert(fast.hasPrefix("error: not found") ? "not found" : fast.hasSuffix("compacted away") ? "compacted" : "sent")
                }
                let fast = spell { try test.store.revisionsToSend(requests, revsLimit: limit) }
                #expect(fast == generalSend(test.store, requests, limit: limit))
            }
        }
        // The stores exercise every outcome: revisions sent, absent ones and compacted bodies.
        #expect(outcomes == ["not found", "compacted", "sent"])
    }
}
