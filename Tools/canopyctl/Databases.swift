import ArgumentParser
import CanopyAdmin
import CanopyCore

struct DatabaseCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "db", abstract: "List, create or delete databases (`default` always exists).",
        subcommands: [List.self, Create.self, Delete.self, Pending.self, Dismiss.self])

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Every database with its counts, its digest and the peers it is shared with.",
            discussion: "DIGEST: the first 16 of the digest's 64 hex digits (--json gives all): two nodes show the same digest exactly when they hold the same documents with the same open leaves.")
        @OptionGroup var connection: ConnectionOptions

        func run() throws {
            let answer = try connection.call(Admin.ListDatabases())
            if connection.json { return printJSON(.object(answer.members)) }
            printTable(["DATABASE", "DOCUMENTS", "UPDATE SEQ", "CONFLICTS", "DIGEST", "SHARED WITH"], answer.reply.databases.map { row in
                let shared = row.sharedWith.map { share in
                    "\(share.nodeID) (\(share.access)\(share.prefix.map { ", ids starting \($0)" } ?? ""))"
                }
                return [row.db, text(row.counts.docCount), text(row.counts.updateSeq), text(row.counts.conflictedCount),
                        String((row.counts.digest ?? "-").prefix(16)), shared.isEmpty ? "-" : shared.joined(separator: ", ")]
            })
        }
    }

    struct Pending: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Databases peers asked to replicate that are not shared with them; `canopyctl share` accepts one.")
        @OptionGroup var connection: ConnectionOptions

        func run() throws {
            let answer = try connection.call(Admin.ListPendingShares())
            if connection.json { return printJSON(.object(answer.members)) }
            let rows = answer.reply.pending
            guard !rows.isEmpty else { return print("no pending databases") }
            printTable(["DATABASE", "OFFERED BY", "ON THIS NODE", "ATTEMPTS"], rows.map { row in
                [row.db, row.nodeID, row.exists ? "yes" : "no (db create first)", text(row.attempts)]
            })
        }
    }

    struct Dismiss: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Dismiss a pending database offer: not listed again, whatever the peer asks, until `share` accepts it or the peer is removed.")
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var target: DatabaseAndPeer

        func run() throws {
            let answer = try connection.call(Admin.DismissPendingShare(db: target.database, nodeID: target.nodeID))
            connection.json ? printJSON(.object(answer.members)) : print("dismissed \(answer.reply.db) from \(answer.reply.nodeID)")
        }
    }

    struct Create: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a database: its own SQLite file, revs limit and conflict setting (adds a [database NAME] section to the config file).",
            discussion: "NAME: a lowercase letter, then lowercase letters, digits and _ $ ( ) + / -, at most 238 bytes (CouchDB's rule).")
        @OptionGroup var connection: ConnectionOptions
        @Argument var name: String
        @Option(help: "Revision ancestors kept per leaf (default: the top-level revs-limit).") var revsLimit: Int64?
        @Option(help: "How conflicts no rule covers are settled: automatic, local-wins, remote-wins, merge-json, manual or \"resolver NAME\".")
        var conflicts: String?

        func run() throws {
            let answer = try connection.call(Admin.CreateDatabase(name: name, revsLimit: revsLimit, conflicts: conflicts))
            connection.json ? printJSON(.object(answer.members)) : print("created database \(answer.reply.db)")
        }
    }

    struct Delete: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete a database and its file, with every document in it (asks for --yes).")
        @OptionGroup var connection: ConnectionOptions
        @Argument var name: String
        @Flag(help: "Yes, delete it and every document in it.") var yes = false

        func run() throws {
            guard yes else {
                throw CtlFailure(status: .usage, message: "deleting database \(name) removes its file and every document in it; run again with --yes to do it")
            }
            let answer = try connection.call(Admin.DeleteDatabase(name: name))
            connection.json ? printJSON(.object(answer.members)) : print("deleted database \(answer.reply.db)")
        }
    }
}

struct Share: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Let a configured peer read and/or write this node's copy of a database (edits the config file).",
        discussion: """
            --access is what the peer may do to THIS node's copy: read (it may pull from this node),
            write (it may push into this node) or read-write. With --prefix, only the documents whose
            id starts with it. Every configured peer shares default in its direction until a share says otherwise.
            """)
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var target: DatabaseAndPeer
    @Option(help: "read, write or read-write.") var access: Access
    @Option(help: "Only documents whose id starts with this.") var prefix: String?

    /// The `access` values (a typo is a usage error before the agent is asked).
    typealias Access = Admin.Access

    func run() throws {
        let answer = try connection.call(Admin.ShareDatabase(db: target.database, nodeID: target.nodeID, access: access, prefix: prefix))
        if connection.json { return printJSON(.object(answer.members)) }
        let share = answer.reply.sharedWith
        let scope = share.prefix.map { " (ids starting \($0))" } ?? ""
        print("shared \(answer.reply.db) with \(share.nodeID): \(share.access)\(scope)")
    }
}

struct Unshare: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Stop sharing a database with a peer: it may no longer read or write this node's copy (edits the config file).")
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var target: DatabaseAndPeer

    func run() throws {
        let answer = try connection.call(Admin.UnshareDatabase(db: target.database, nodeID: target.nodeID))
        connection.json ? printJSON(.object(answer.members)) : print("unshared \(answer.reply.db) with \(answer.reply.nodeID)")
    }
}

/// The database and peer that `share`, `unshare` and `db dismiss` name.
struct DatabaseAndPeer: ParsableArguments {
    @Argument(help: "The database.") var database: String
    @Argument(help: "The peer's node id.") var nodeID: String
}

extension Admin.Access: ExpressibleByArgument {}
