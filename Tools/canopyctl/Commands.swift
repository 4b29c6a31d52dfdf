import CanopyAdmin
import ArgumentParser
import CanopyAgent
import CanopyCore
import Foundation

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Node id, listen address, document and conflict counts, rules, resolvers and every peer.")
    @OptionGroup var connection: ConnectionOptions

    func run() throws {
        let answer = try connection.call(Admin.Status())
        if connection.json { return printJSON(.object(answer.members)) }
        let status = answer.reply
        let rows: [(String, String)] = [
            ("node id", status.nodeID), ("listen", status.listen),
            ("network", status.network == "private" ? "private (network-key)" : "open"),
            ("documents", text(status.counts.docCount)), ("deleted", text(status.counts.docDelCount)),
            ("update seq", text(status.counts.updateSeq)), ("digest", status.counts.digest ?? "-"),
            ("conflicted", conflictedSummary(status)), ("conflicts", status.conflicts),
        ]
        /// One `name  value` line of the status, the value in the column the rows share.
        func line(_ name: String, _ value: String) { print(name.padding(toLength: 12, withPad: " ", startingAt: 0) + value) }
        for (name, value) in rows { line(name, value) }
        if status.damaged > 0 {
            // Never quiet: the operator has a damaged file to restore.
            line("damaged", "\(status.damaged) (last: \(text(status.lastDamage?.doc)): \(text(status.lastDamage?.reason))); run `canopyctl check`, restore from a backup")
        }
        let awaiting = status.counts.awaitingAttachments
        if awaiting > 0 {
            line("fetching", (awaiting == 1 ? "1 revision from a peer waits for its" : "\(awaiting) revisions from peers wait for their")
                + " attachment content (visible once it is complete and verified)")
        }
        if !status.rules.isEmpty {
            // First match wins, so the order printed is the order applied.
            let described = status.rules.map { rule in
                var matches: [String] = []
                if let prefix = rule.prefix { matches.append("id \(prefix)…") }
                if let value = rule.value { matches.append("\(text(rule.field)) = \(value)") }
                return "\(rule.name) (\(matches.joined(separator: ", "))): \(rule.strategy)"
            }
            line("rules", described.joined(separator: "; "))
        }
        if !status.resolvers.isEmpty {
            let names = status.resolvers.map { resolver in
                let claims: String
                switch resolver.prefix {
                case let prefix?: claims = prefix.isEmpty ? "every id no rule covers" : "prefix \(prefix)"
                case nil: claims = "what rules route to it"
                }
                return "\(resolver.name) (\(claims), \(resolver.offered) offered, \(resolver.waiting) waiting)"
            }
            line("resolvers", names.joined(separator: "; "))
        }
        print("")
        printPeerTable(status.peers)
        printDatabaseTable(status.peers)
    }

    /// `N`, or `N (W waiting for a resolver, K kept for resolve)` when some are.
    private func conflictedSummary(_ status: Admin.Status.Reply) -> String {
        let total = text(status.counts.conflictedCount)
        guard status.conflictsAwaitingResolver + status.conflictsKept > 0 else { return total }
        return "\(total) (\(status.conflictsAwaitingResolver) waiting for a resolver, \(status.conflictsKept) kept for resolve)"
    }
}

struct Put: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write a document; prints its id and new revision. A stale --rev exits 3 (conflict), unless a rule covers the document.")
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var database: DatabaseOption
    @Argument var id: String
    @Option(help: "The revision this write replaces (omit to create).") var rev: RevisionID?
    @Option(help: "The body as JSON.") var body: String?
    @Option(help: "Read the body from a file ('-' for stdin).") var file: String?

    func validate() throws {
        if body != nil && file != nil { throw ValidationError("give --body or --file, not both") }
    }

    func run() throws {
        let body = try readBody(inline: body, file: file)
        // The agent's own rules for the `_` members, applied before asking it: a body they refuse
        // is bad input, as one that is not a JSON object is.
        do throws(AdminFailure) {
            _ = try DocumentMembers(body: body, documentID: id, rev: rev)
        } catch {
            throw CtlFailure(status: .usage, message: error.message)
        }
        let answer = try connection.call(Admin.PutDocument(db: database.db, doc: id, body: body, rev: rev))
        connection.json ? printJSON(.object(answer.members)) : print(writeSummary(answer.reply))
    }
}

struct Get: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print a document in CouchDB's JSON shape.")
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var database: DatabaseOption
    @Argument var id: String
    @Option(help: "A specific revision.") var rev: RevisionID?
    @Flag(help: "Include _revisions (the history).") var revs = false
    @Flag(help: "Include _conflicts.") var conflicts = false

    func run() throws {
        let answer = try connection.call(Admin.GetDocument(db: database.db, doc: id, rev: rev, revs: revs, conflicts: conflicts))
        // As CouchDB answers 404 `deleted`: the current revision of a deleted document is not a
        // document to print. A deletion asked for by --rev is.
        if rev == nil, answer.reply.deleted {
            let revision = answer.reply.revision?.description ?? "-"
            let message = "document \"\(id.prefix(80))\" is deleted (at revision \(revision); get --rev \(revision) prints the deletion)"
            throw CtlFailure(
                status: .notFound, message: message,
                errorObject: .object([
                    "code": .string("not_found"), "message": .string(message), "reason": .string("deleted"), "rev": .string(revision),
                ]))
        }
        printJSON(connection.json ? .object(answer.members) : answer.reply.doc)
    }
}

struct Delete: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Delete a document (needs its current revision; a _local/ document has none). A stale --rev exits 3 (conflict), unless a rule covers the document.")
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var database: DatabaseOption
    @Argument var id: String
    @Option(help: "The current revision (under a rule, a stale one is kept as a branch, as put keeps one).") var rev: RevisionID?

    func validate() throws {
        if rev == nil && !id.hasPrefix("_local/") {
            throw ValidationError("give --rev REV, the revision deleted: the document's current one (canopyctl get \(id) prints it as _rev)")
        }
    }

    func run() throws {
        let answer = try connection.call(Admin.DeleteDocument(db: database.db, doc: id, rev: rev))
        connection.json ? printJSON(.object(answer.members)) : print(writeSummary(answer.reply))
    }
}

struct Conflicts: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List conflicted documents: the current revision, what the conflict is kept for (a resolver client, or resolve) and the other open leaves, deleted ones marked (deleted).")
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var database: DatabaseOption

    func run() throws {
        let answer = try connection.call(Admin.ListConflicts(db: database.db))
        if connection.json { return printJSON(.object(answer.members)) }
        // KEPT FOR: the resolver client a conflict waits for, or `resolve` (canopyctl resolve).
        printTable(["DOCUMENT", "CURRENT", "KEPT FOR", "CONFLICTING"], answer.reply.conflicts.map { row in
            [row.doc, row.rev.description, row.resolver.map { "resolver \($0)" } ?? "resolve", conflicting(row)]
        })
    }
}

/// The CONFLICTING cell of a `conflicts` row: the other open leaves, live ones first, each deleted
/// one followed by `(deleted)` (an edit against a deletion is conflicted by its deleted leaf).
private func conflicting(_ row: Admin.ConflictRow) -> String {
    let cells = row.conflicts.map(\.description) + row.deletedConflicts.map { "\($0) (deleted)" }
    return cells.isEmpty ? "-" : cells.joined(separator: ",")
}

struct Resolve: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Settle a conflict: keep a leaf, write a merged body, or delete.")
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var database: DatabaseOption
    @Argument var id: String
    @Option(help: "The leaf to keep.") var pick: RevisionID?
    @Option(help: "A merged body (JSON).") var body: String?
    @Flag(help: "Delete the document.") var delete = false

    func validate() throws {
        guard [pick != nil, body != nil, delete].filter({ $0 }).count == 1 else {
            throw ValidationError("give exactly one of --pick REV, --body JSON or --delete")
        }
    }

    func run() throws {
        var resolution = Admin.Resolution(pick: pick, delete: delete ? true : nil)
        if let body {
            let merged = try readBody(inline: body, file: nil)
            do throws(AdminFailure) {
                _ = try DocumentMembers.resolutionBody(merged, documentID: id)
            } catch {
                throw CtlFailure(status: .usage, message: error.message)
            }
            resolution.body = merged
        }
        let answer = try connection.call(Admin.Resolve(db: database.db, doc: id, resolution))
        connection.json ? printJSON(.object(answer.members)) : print("\(answer.reply.doc) \(answer.reply.rev)")
    }
}

struct Changes: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "The changes feed.")
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var database: DatabaseOption
    // Unconditional: `--since -1` is a value to refuse by name, not an unknown option `-1`.
    @Option(parsing: .unconditional, help: "Only changes after this sequence (0 or more).") var since: Int64 = 0
    @Option(parsing: .unconditional, help: "At most this many (1 or more).") var limit: Int64?

    func validate() throws {
        guard since >= 0 else {
            throw ValidationError("--since must be a sequence number: 0 (from the start) or more, not \(since)")
        }
        if let limit, limit < 1 { throw ValidationError("--limit must be 1 or more, not \(limit)") }
    }

    func run() throws {
        let answer = try connection.call(Admin.Changes(db: database.db, since: since, limit: limit))
        if connection.json { return printJSON(.object(answer.members)) }
        printTable(["SEQ", "DOCUMENT", "REVISIONS", "DELETED"], answer.reply.results.map { row in
            let revs = row.changes.map(\.rev.description).joined(separator: ",")
            return [text(row.seq), row.doc, revs, row.deleted == true ? "yes" : ""]
        })
    }
}

struct Stats: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Counters.")
    @OptionGroup var connection: ConnectionOptions

    func run() throws {
        let result = try connection.call(Admin.Stats()).members
        if connection.json { return printJSON(.object(result)) }
        // Every counter the agent sends, by name: one this client does not know yet included.
        printTable(["COUNTER", "VALUE"], result.keys.sorted().map { [$0, text(result[$0])] })
    }
}

struct Reload: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Re-read the config file.")
    @OptionGroup var connection: ConnectionOptions

    func run() throws {
        let answer = try connection.call(Admin.Reload())
        if connection.json { return printJSON(.object(answer.members)) }
        let names = answer.reply.restartRequired
        guard !names.isEmpty else { return print("reloaded") }
        print("reloaded; restart canopyd to apply: \(names.joined(separator: ", "))")
    }
}

struct Shutdown: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Stop the agent cleanly; returns once it has exited (its data directory is free).")
    @OptionGroup var connection: ConnectionOptions

    func run() throws {
        let client = try connection.connect()
        let answer = try connection.call(client, Admin.Shutdown())
        do {
            try AgentExitWait.wait(for: client, lockPath: answer.reply.lockPath, seconds: AgentLimits.shutdownWaitSeconds)
        } catch {
            throw CtlFailure(status: .error, message: error.description)
        }
        connection.json ? printJSON(.object(answer.members)) : print("stopped")
    }
}

/// One line for a write: the id and new revision, or for a `_local/` document (no revisions)
/// that it was stored locally.
func writeSummary(_ reply: Admin.WriteReply) -> String {
    let revision = reply.rev.map(\.description) ?? "-"
    if reply.local == true { return "\(reply.doc) (local document: stored on this node only, never replicated)" }
    if reply.branched == true {
        // Not silent: the write met a newer revision, and a rule settled or kept the conflict.
        return "\(reply.doc) \(revision) (the given --rev was stale: kept as a conflicting branch, its rule applied; current revision \(reply.current.map(\.description) ?? "-"))"
    }
    return "\(reply.doc) \(revision)"
}

struct Backup: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Copy the running node into a new directory that restores as a data directory.",
        discussion: """
            PATH gets canopy.sqlite (a consistent snapshot, taken while the agent runs), the other
            databases, the attachment content their documents name, and canopy.conf, and with
            --with-identity identity.key too. Restore: canopyd run --data-dir PATH (with the
            identity: the same node, which catches up from its peers), or canopyd init --data-dir PATH
            (without it: a new node id with the same documents and peers). A backup that did not
            finish keeps PATH/backup-unfinished, saying why, and canopyd refuses to restore it.
            """)
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "A new directory (or an empty one).") var path: String
    @Flag(help: "Copy identity.key too (keep such a backup as private as the key).") var withIdentity = false

    func run() throws {
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        let answer = try connection.call(Admin.Backup(path: absolute, withIdentity: withIdentity))
        if connection.json { return printJSON(.object(answer.members)) }
        let reply = answer.reply
        func megabytes(_ bytes: Int64) -> String { String(format: "%.1f", Double(bytes) / 1_048_576) + " MiB" }
        let files = reply.attachments
        let content = files == 0 ? "" : " and \(files) attachment file\(files == 1 ? "" : "s") (\(megabytes(reply.attachmentBytes)))"
        print("backed up \(reply.documents) documents\(content) to \(reply.path) (database \(megabytes(reply.bytes))"
            + (withIdentity ? ", with identity.key)" : "; without identity.key)"))
    }
}

struct Check: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run SQLite's full integrity check on every database of the running node, check every document row against its revisions and verify the attachment content they name; exits 1 if anything is damaged.")
    @OptionGroup var connection: ConnectionOptions
    @Flag(help: "Check the databases only, not the attachment content (which reads every attachment file whole).")
    var skipAttachments = false

    func run() throws {
        let answer = try connection.call(Admin.Check(attachments: !skipAttachments))
        let reply = answer.reply
        if connection.json { printJSON(.object(answer.members)) }
        if !connection.json {
            for leftover in reply.leftovers { print("leftover: \(leftover)") }
        }
        guard reply.sound else {
            if !connection.json {
                for problem in reply.problems { print(problem) }
            }
            throw CtlFailure(
                status: .error,
                message: "the node's data is damaged; restore it from a backup (canopyctl backup) or move it aside and let the node resync from its peers")
        }
        let files = reply.attachments
        let content = files == 0 ? "" : ", \(files) attachment file\(files == 1 ? "" : "s") (\(String(format: "%.1f", Double(reply.attachmentBytes) / 1_048_576)) MiB) verified"
        let rows = reply.documents
        if !connection.json {
            print("the database is sound (integrity check, \(rows) document row\(rows == 1 ? "" : "s") checked against their revisions\(content), \(text(.double(reply.seconds))) s)")
        }
    }
}

struct Why: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Say, for each peer, whether it holds this node's current revision of a document, and if not why not.",
        discussion: """
            Reasons: holds (the peer acknowledged it), not_shared, outside_prefix (the share's prefix leaves the id out), \
            not_sent (this node lets the peer write only), refused_by_peer (with the peer's reason), peer_does_not_take \
            (the peer takes none of this node's writes, or other ids only), awaiting_content (this node's revisions wait \
            for attachment content), offline (since when), awaiting_resolver (the conflict here waits for a resolver), \
            queued (connected, on its way). Answered from what this node knows: shares, the peer's acknowledgements, \
            its subscription and refusals.
            """)
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var database: DatabaseOption
    @Argument(help: "The document id.") var id: String
    @Option(help: "Only this peer (a node id).") var peer: String?

    func run() throws {
        let answer = try connection.call(Admin.Why(db: database.db, doc: id, peer: peer))
        if connection.json { return printJSON(.object(answer.members)) }
        let reply = answer.reply
        var heading = "\(reply.doc) in \(reply.db): "
        heading += reply.rev.map { "this node's current revision is \($0)\(reply.deleted ? " (deleted)" : "")" } ?? "this node holds no revision yet"
        if reply.awaitingContent > 0 { heading += "; \(reply.awaitingContent) waiting for attachment content" }
        if let resolver = reply.awaitingResolver { heading += "; its conflict waits for resolver \(resolver)" }
        print(heading)
        guard !reply.peers.isEmpty else { return print("no peers configured") }
        printTable(["PEER", "HOLDS", "REASON", "WHY"], reply.peers.map { row in
            [row.nodeID, row.holds ? "yes" : "no", row.reason.rawValue, row.detail]
        })
    }
}

struct Compare: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Compare a database with a connected peer's: identical, or the documents that differ and which side holds what.",
        discussion: """
            The peer is asked over its replication connection and compares only what its share lets this node read \
            (its prefix). Both sides hold the same documents when their digests agree; a difference is located by \
            walking the digest tree, one round trip per level. SIDE is local_only (only this node holds it), \
            remote_only (only the peer) or both (each holds other open leaves). Exit status 0 when identical, \
            1 when not (or when the compare could not be made).
            """)
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var database: DatabaseOption
    @Argument(help: "The peer's node id.") var peer: String
    @Option(help: "Only documents whose id starts with this.") var prefix: String?
    @Option(help: "List at most this many differing documents (default \(Admin.Compare.limitDefault)).") var limit: Int?

    func run() throws {
        let answer = try connection.call(Admin.Compare(peer: peer, db: database.db, prefix: prefix, limit: limit))
        let reply = answer.reply
        let scope = reply.prefix.isEmpty ? "every document" : "ids starting with \"\(reply.prefix)\""
        if connection.json {
            printJSON(.object(answer.members))
        } else if reply.identical {
            print("identical: \(reply.db) holds the same documents here and on \(reply.peer) (\(scope))")
        } else {
            func leaves(_ list: [Admin.CompareLeaf]) -> String {
                list.isEmpty ? "-" : list.map { "\($0.rev)\($0.deleted ? " (deleted)" : "")" }.joined(separator: ", ")
            }
            printTable(["DOC", "SIDE", "HERE", "PEER"], reply.differences.map { row in
                [row.doc, row.side.rawValue, leaves(row.local), leaves(row.remote)]
            })
        }
        guard !reply.identical else { return }
        let count = reply.differences.count
        var message = "\(count) document\(count == 1 ? "" : "s") of \(reply.db) differ\(count == 1 ? "s" : "") between this node and \(reply.peer) (\(scope))"
        if reply.truncated { message += "; more may differ: the first \(count) are listed, --limit lists more" }
        throw CtlFailure(status: .error, message: message)
    }
}
