import Canopy
import Foundation
import Synchronization
import Testing

/// Conflicts settled the way Couchbase Lite's `ReplicatorConfiguration.conflictResolver` settles
/// them: by the resolver on B's replicator, as A's revisions arrive.
extension NodeReplicationTests {
    /// A allows B (A only sends); both save `base` of `id` (the same revision on each: ids are
    /// content hashes), then A saves `remote` and B saves `local` over it, so B's next pull from
    /// A makes a conflict. Returns both revisions.
    static func divergedEdits(
        _ a: Node, _ b: Node, id: String, base: JSONValue, local: JSONValue, remote: JSONValue
    ) async throws -> (local: RevisionID, remote: RevisionID) {
        a.replicator(ReplicatorConfiguration(peer: b.nodeID, direction: .push)).start()
        let first = try await a.database.save(json: base, id: id)
        #expect(try await b.database.save(json: base, id: id) == first)
        return await (try b.database.save(json: local, id: id, replacing: first), try a.database.save(json: remote, id: id, replacing: first))
    }

    /// B's one-shot pull from A, settling conflicts with `policy`.
    static func pull(into b: Node, from a: Node, resolving policy: ConflictPolicy?, documentIDs: [String]? = nil) -> Replicator {
        b.replicator(ReplicatorConfiguration(
            peer: a.nodeID, address: a.listenAddress, direction: .pull, continuous: false, documentIDs: documentIDs,
            conflictResolution: policy))
    }

    /// A television edited on both nodes (ZeroDark's example): B changed the size and marked it
    /// widescreen, A changed the size too and the number of HDMI inputs.
    static let television: (base: JSONValue, local: JSONValue, remote: JSONValue) = (
        .object(["name": .string("TV"), "size": .int(40), "widescreen": .bool(false), "hdmi inputs": .int(2)]),
        .object(["name": .string("TV"), "size": .int(55), "widescreen": .bool(true), "hdmi inputs": .int(2)]),
        .object(["name": .string("TV"), "size": .int(50), "widescreen": .bool(false), "hdmi inputs": .int(4)])
    )

    /// The application's three-way merge: per field, the local value if this node changed it
    /// since the common ancestor, else the remote one.
    static let mergeLocalChangesIntoRemote = ClosureResolver { conflict in
        guard let local = conflict.leaves.first(where: { $0.revision == conflict.localRevision })?.body?.objectValue,
              let remote = conflict.leaves.first(where: { $0.revision != conflict.localRevision })?.body?.objectValue,
              let base = conflict.commonAncestorBody?.objectValue
        else { throw MergeImpossible() }
        var merged = remote
        for (field, value) in local where base[field] != value { merged[field] = value }
        return .merged(.object(merged))
    }

    struct MergeImpossible: Error {}

    @Test("a resolver on the replicator's configuration settles A's edit as it arrives: local wins, remote wins, a three-way merge, a delete", .timeLimit(.minutes(5)))
    func replicatorResolver() async throws {
        let tv = Self.television
        let cases: [(name: String, resolver: ClosureResolver, expected: (RevisionID, RevisionID) -> JSONValue?)] = [
            ("local wins", ClosureResolver { conflict in .keep(try #require(conflict.localRevision)) }, { _, _ in tv.local }),
            ("remote wins", ClosureResolver { conflict in
                .keep(try #require(conflict.leaves.first { $0.revision != conflict.localRevision }).revision)
            }, { _, _ in tv.remote }),
            ("merge", Self.mergeLocalChangesIntoRemote, { _, _ in
                .object(["name": .string("TV"), "size": .int(55), "widescreen": .bool(true), "hdmi inputs": .int(4)])
            }),
            ("no document", ClosureResolver { _ in .delete }, { _, _ in nil }),
        ]
        for (name, resolver, expected) in cases {
            try await withTwoNodes { a, b in
                let (local, remote) = try await Self.divergedEdits(a, b, id: "tv", base: tv.base, local: tv.local, remote: tv.remote)
                let replicator = Self.pull(into: b, from: a, resolving: .custom(resolver))
                var documents = replicator.documentEvents.makeAsyncIterator()
                try await replicator.sync()
                let seen = await Self.documents(&documents) { $0.event == .conflictResolved }
                #expect(seen.last?.documentID == "tv", "\(name): \(seen)")
                #expect(try await b.database.conflictedDocumentIDs().isEmpty, "\(name)")
                #expect(try await b.database.document(id: "tv")?.body == expected(local, remote), "\(name)")
                replicator.stop()
            }
        }
    }

    @Test("a replicator's own resolver decides the conflicts of a sync in both directions, although the peer settles conflicts automatically: every time", .timeLimit(.minutes(5)), arguments: 0..<3)
    func replicatorResolverDecidesBothWays(round: Int) async throws {
        try await withTwoNodes { a, b in
            let tv = Self.television
            let ids = (0..<20).map { "tv-\($0)" }
            a.replicator(ReplicatorConfiguration(peer: b.nodeID)).start()
            for id in ids {
                let first = try await a.database.save(json: tv.base, id: id)
                #expect(try await b.database.save(json: tv.base, id: id) == first)
                try await b.database.save(json: tv.local, id: id, replacing: first)
                try await a.database.save(json: tv.remote, id: id, replacing: first)
            }
            let asked = Mutex(0)
            let resolver = ClosureResolver { conflict in
                asked.withLock { $0 += 1 }
                return try Self.mergeLocalChangesIntoRemote.resolve(conflict)
            }
            let replicator = b.replicator(ReplicatorConfiguration(
                peer: a.nodeID, address: a.listenAddress, continuous: false, conflictResolution: .custom(resolver)))
            try await replicator.sync()
            let merged: JSONValue = .object(["name": .string("TV"), "size": .int(55), "widescreen": .bool(true), "hdmi inputs": .int(4)])
            #expect(asked.withLock { $0 } == ids.count, "round \(round): B's resolver decides every conflict of its sync")
            for id in ids { #expect(try await b.database.document(id: id)?.body == merged, "round \(round): \(id) on B") }
            try await replicator.sync()
            for id in ids { #expect(try await a.database.document(id: id)?.body == merged, "round \(round): \(id) on A") }
            let kept = (a: try await a.database.conflictedDocumentIDs(), b: try await b.database.conflictedDocumentIDs())
            #expect(kept.a.isEmpty && kept.b.isEmpty)
            replicator.stop()
        }
    }

    @Test("without a resolver on the replicator, the database's automatic rule settles a conflict during replication: deletes win, then most revisions", .timeLimit(.minutes(5)))
    func automaticRuleDuringReplication() async throws {
        try await withTwoNodes { a, b in
            let (_, remote) = try await Self.divergedEdits(
                a, b, id: "deleted-there", base: .object(["v": .int(0)]), local: .object(["v": .int(1)]), remote: .object(["v": .int(2)]))
            try await a.database.delete(id: "deleted-there", revision: remote)
            try await Self.pull(into: b, from: a, resolving: nil).sync()
            #expect(try await b.database.document(id: "deleted-there") == nil, "the deletion on A wins over B's edit")
        }
        try await withTwoNodes { a, b in
            let (local, remote) = try await Self.divergedEdits(
                a, b, id: "edited-twice", base: .object(["v": .int(0)]), local: .object(["v": .int(1)]), remote: .object(["v": .int(2)]))
            try await b.database.save(json: .object(["v": .int(3)]), id: "edited-twice", replacing: local)
            _ = remote
            try await Self.pull(into: b, from: a, resolving: nil).sync()
            #expect(try await b.database.document(id: "edited-twice")?.body == .object(["v": .int(3)]), "B's two edits beat A's one")
            #expect(try await b.database.conflictedDocumentIDs().isEmpty)
        }
    }

    @Test("a resolver that throws leaves the conflict kept and reported as resolutionFailed; when the replicator starts again it is retried and settled", .timeLimit(.minutes(5)))
    func throwingResolverRetriedOnRestart() async throws {
        try await withTwoNodes { a, b in
            let tv = Self.television
            _ = try await Self.divergedEdits(a, b, id: "tv", base: tv.base, local: tv.local, remote: tv.remote)
            // On a retry the resolver is not told which leaf was B's (`localRevision` is nil): it
            // decides by content, keeping the larger screen.
            let failing = Mutex(true)
            let resolver = ClosureResolver { conflict in
                if failing.withLock({ $0 }) { throw MergeImpossible() }
                #expect(conflict.localRevision == nil && conflict.leaves.count == 2)
                let size = { (leaf: ConflictLeaf) -> Int64 in if case .int(let size)? = leaf.body?.objectValue?["size"] { size } else { 0 } }
                return .keep(try #require(conflict.leaves.max { size($0) < size($1) }).revision)
            }
            let replicator = Self.pull(into: b, from: a, resolving: .custom(resolver))
            var documents = replicator.documentEvents.makeAsyncIterator()
            try await replicator.sync()
            let failed = await Self.documents(&documents) { $0.event == .resolutionFailed }
            #expect(failed.last?.documentID == "tv" && failed.last?.detail?.contains("MergeImpossible") == true, "\(failed)")
            #expect(try await b.database.conflictedDocumentIDs() == ["tv"])

            failing.withLock { $0 = false }
            replicator.stop()
            var again = replicator.documentEvents.makeAsyncIterator()
            replicator.start()
            let settled = await Self.documents(&again) { $0.event == .conflictResolved }
            #expect(settled.last?.documentID == "tv", "\(settled)")
            #expect(try await b.database.conflictedDocumentIDs().isEmpty)
            #expect(try await b.database.document(id: "tv")?.body == tv.local)
            replicator.stop()
        }
    }

    @Test("stopping a continuous replicator while conflicts arrive leaves none unsettled: each batch is written with its resolutions", .timeLimit(.minutes(5)))
    func stopSettlesWhatArrived() async throws {
        try await withTwoNodes { a, b in
            let count = 300
            a.replicator(ReplicatorConfiguration(peer: b.nodeID, direction: .push)).start()
            var firsts: [RevisionID] = []
            for index in 0..<count {
                await firsts.append(try a.database.save(json: .object(["n": .int(Int64(index))]), id: "doc-\(index)"))
                try await b.database.save(json: .object(["n": .int(Int64(index))]), id: "doc-\(index)")
            }
            for index in 0..<count {
                try await a.database.save(json: .object(["n": .int(Int64(index)), "by": .string("a")]), id: "doc-\(index)", replacing: firsts[index])
                try await b.database.save(json: .object(["n": .int(Int64(index)), "by": .string("b")]), id: "doc-\(index)", replacing: firsts[index])
            }
            b.database.conflictResolution = .manual   // a conflict the replicator left would stay
            let replicator = b.replicator(ReplicatorConfiguration(
                peer: a.nodeID, address: a.listenAddress, direction: .pull,
                conflictResolution: .custom(ClosureResolver { conflict in .keep(try #require(conflict.localRevision)) })))
            var documents = replicator.documentEvents.makeAsyncIterator()
            replicator.start()
            _ = await Self.documents(&documents) { $0.event == .conflictResolved }
            replicator.stop()
            await b.stop()
            let reopened = try Node(directory: b.directory)
            #expect(try await reopened.database.conflictedDocumentIDs().isEmpty)
            var settled = 0
            for index in 0..<count where try await reopened.database.document(id: "doc-\(index)")?.body.objectValue?["by"] == .string("b") {
                settled += 1
            }
            #expect(settled == count, "every document keeps B's edit")
            await reopened.stop()
        }
    }

    @Test("documentIDs limits a replicator to those documents, both ways; an empty or oversized list fails the replicator with the reason", .timeLimit(.minutes(5)))
    func documentIDsFilter() async throws {
        try await withTwoNodes { a, b in
            try await a.database.save(json: .object(["n": .int(1)]), id: "wanted")
            try await a.database.save(json: .object(["n": .int(2)]), id: "unwanted")
            try await b.database.save(json: .object(["n": .int(3)]), id: "mine")
            try await b.database.save(json: .object(["n": .int(4)]), id: "wanted-too")
            a.replicator(ReplicatorConfiguration(peer: b.nodeID)).start()
            let replicator = b.replicator(ReplicatorConfiguration(
                peer: a.nodeID, address: a.listenAddress, continuous: false, documentIDs: ["wanted", "wanted-too"]))
            try await replicator.sync()
            #expect(try await b.database.document(id: "wanted") != nil)
            #expect(try await b.database.document(id: "unwanted") == nil)
            #expect(try await a.database.document(id: "wanted-too") != nil)
            #expect(try await a.database.document(id: "mine") == nil)
            replicator.stop()

            for ids in [[String](), [String(repeating: "x", count: 1025)]] {
                let broken = b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: a.listenAddress, documentIDs: ids))
                do {
                    try await broken.sync()
                    Issue.record("a replicator with \(ids.count) document ids synced")
                } catch let error as ReplicatorError {
                    #expect(error.code == "invalid_configuration" && error.message.contains("documentIDs"), "\(error)")
                }
            }
        }
    }
}

extension NodeReplicationTests {
    /// Waits until `database`'s changes feed has shown every id of `ids`.
    static func waitForDocuments(_ ids: Set<String>, in database: Database) async throws {
        var missing = ids
        for try await change in database.changes() {
            missing.remove(change.documentID)
            if missing.isEmpty { return }
        }
    }

    @Test("one database replicates with two remotes at once, pushing and pulling concurrently: every node ends with every document", .timeLimit(.minutes(5)))
    func severalRemotes() async throws {
        let directory = TemporaryDirectory()
        let a = try Node(directory: directory.path("a"))
        let b = try Node(directory: directory.path("b"))
        let c = try Node(directory: directory.path("c"))
        // B is the hub: A and C only accept it; B dials both and replicates both ways with each.
        a.replicator(ReplicatorConfiguration(peer: b.nodeID)).start()
        c.replicator(ReplicatorConfiguration(peer: b.nodeID)).start()
        let toA = b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: a.listenAddress))
        let toC = b.replicator(ReplicatorConfiguration(peer: c.nodeID, address: c.listenAddress))
        toA.start()
        toC.start()
        for index in 0..<200 {
            try await a.database.save(json: .object(["from": .string("a"), "n": .int(Int64(index))]), id: "a-\(index)")
            try await b.database.save(json: .object(["from": .string("b"), "n": .int(Int64(index))]), id: "b-\(index)")
            try await c.database.save(json: .object(["from": .string("c"), "n": .int(Int64(index))]), id: "c-\(index)")
        }
        let every = Set(["a", "b", "c"].flatMap { node in (0..<200).map { "\(node)-\($0)" } })
        try await Self.waitForDocuments(every, in: a.database)
        try await Self.waitForDocuments(every, in: b.database)
        try await Self.waitForDocuments(every, in: c.database)
        #expect(try await c.database.document(id: "a-199")?.body == .object(["from": .string("a"), "n": .int(199)]), "A's documents reach C through B")
        toA.stop()
        toC.stop()
        await c.stop()
        await b.stop()
        await a.stop()
    }
}
