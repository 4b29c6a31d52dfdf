import ArgumentParser
import CanopyCore

struct DatabaseCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "db", abstract: "List, create or delete databases (`default` always exists).",
        subcommands: [List.self, Create.self, Delete.self, Pending.self, Dismiss.self])

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Every database with its counts and the peers it is shared with.")
        @OptionGroup var connection: ConnectionOptions

        func run() throws {
            let result = try connection.call("db.list")
            if connection.json { return printJSON(.object(result)) }
            guard case .array(let rows)? = result["databases"] else { return }
            printTable(["DATABASE", "DOCUMENTS", "UPDATE SEQ", "CONFLICTS", "SHARED WITH"], rows.map { row in
                let members = row.objectValue ?? [:]
                var shared: [String] = []
                if case .array(let peers)? = members["shared_with"] {
                    shared = peers.map { peer in
                        let members = peer.objectValue
                        let scope = members?["prefix"].map { ", ids starting \(text($0))" } ?? ""
                        return "\(text(members?["node_id"])) (\(text(members?["access"]))\(scope))"
                    }
                }
                return [text(members["db"]), text(members["doc_count"]), text(members["update_seq"]), text(members["conflicted_count"]),
                        shared.isEmpty ? "-" : shared.joined(separator: ", ")]
            })
        }
    }

    struct Pending: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Databases peers asked to replicate that are not shared with them; `canopyctl share` accepts one.")
        @OptionGroup var connection: ConnectionOptions

        func run() throws {
            let result = try connection.call("db.pending")
            if connection.json { return printJSON(.object(result)) }
            guard case .array(let rows)? = result["pending"], !rows.isEmpty else { return print("no pending databases") }
            printTable(["DATABASE", "OFFERED BY", "ON THIS NODE", "ATTEMPTS"], rows.map { row in
                let members = row.objectValue ?? [:]
                return [text(members["db"]), text(members["node_id"]), members["exists"] == .bool(true) ? "yes" : "no (db create first)",
                        text(members["attempts"])]
            })
        }
    }

    struct Dismiss: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Dismiss a pending database offer: not listed again, whatever the peer asks, until `share` accepts it or the peer is removed.")
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var target: DatabaseAndPeer

        func run() throws {
            let result = try connection.call("db.dismiss", target.arguments)
            connection.json ? printJSON(.object(result)) : print("dismissed \(text(result["db"])) from \(text(result["node_id"]))")
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
            var arguments: [String: JSONValue] = ["name": .string(name)]
            if let revsLimit { arguments["revs_limit"] = .int(revsLimit) }
            if let conflicts { arguments["conflicts"] = .string(conflicts) }
            let result = try connection.call("db.create", arguments)
            connection.json ? printJSON(.object(result)) : print("created database \(text(result["db"]))")
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
            let result = try connection.call("db.delete", ["name": .string(name)])
            connection.json ? printJSON(.object(result)) : print("deleted database \(text(result["db"]))")
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
    enum Access: String, ExpressibleByArgument, CaseIterable {
        case read, write
        case readWrite = "read-write"
    }

    func run() throws {
        var arguments = target.arguments
        arguments["access"] = .string(access.rawValue)
        if let prefix { arguments["prefix"] = .string(prefix) }
        let result = try connection.call("share", arguments)
        if connection.json { return printJSON(.object(result)) }
        let share = result["shared_with"]?.objectValue
        let scope = share?["prefix"].map { " (ids starting \(text($0)))" } ?? ""
        print("shared \(text(result["db"])) with \(text(share?["node_id"])): \(text(share?["access"]))\(scope)")
    }
}

struct Unshare: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Stop sharing a database with a peer: it may no longer read or write this node's copy (edits the config file).")
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var target: DatabaseAndPeer

    func run() throws {
        let result = try connection.call("unshare", target.arguments)
        connection.json ? printJSON(.object(result)) : print("unshared \(text(result["db"])) with \(text(result["node_id"]))")
    }
}

/// The database and peer that `share`, `unshare` and `db dismiss` name.
struct DatabaseAndPeer: ParsableArguments {
    @Argument(help: "The database.") var database: String
    @Argument(help: "The peer's node id.") var nodeID: String

    /// As the admin commands take them: `db`, `node_id`.
    var arguments: [String: JSONValue] { ["db": .string(database), "node_id": .string(nodeID)] }
}
