import ArgumentParser
import CanopyCore

struct Peers: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Configured peers, and pending ones (refused unknown node ids).")
    @OptionGroup var connection: ConnectionOptions

    func run() throws {
        let result = try connection.call("peers")
        if connection.json { return printJSON(.object(result)) }
        printPeerTable(result["peers"])
        printDatabaseTable(result["peers"])
        if case .array(let pending)? = result["pending"], !pending.isEmpty {
            // The address a pending node connected from is its side of that connection (usually
            // an ephemeral port), not where it listens: accepting it without an address lets it
            // connect; add its listening address with `peer add` if this node should dial it.
            print("\npending (refused unknown nodes; allow one with `canopyctl peer accept NODEID`):")
            printTable(["NODE ID", "CONNECTED FROM", "ATTEMPTS"], pending.map { row in
                [text(row.objectValue?["node_id"]), text(row.objectValue?["address"]), text(row.objectValue?["attempts"])]
            })
        }
    }
}

struct PeerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "peer", abstract: "Add, remove or accept a peer (edits the config file).",
        subcommands: [Add.self, Remove.self, Accept.self])

    struct Add: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Allow a peer and dial it at HOST:PORT ('-': only accept its connections).")
        @OptionGroup var connection: ConnectionOptions
        @Argument var nodeID: String
        @Argument var address: String
        @Option(help: "push, pull or both.") var direction = Direction.both
        @Option(help: "continuous or once.") var mode = Mode.continuous

        /// The `direction` values (a typo is a usage error before the agent is asked).
        enum Direction: String, ExpressibleByArgument, CaseIterable { case push, pull, both }
        /// The `mode` values.
        enum Mode: String, ExpressibleByArgument, CaseIterable { case continuous, once }

        func run() throws {
            let result = try connection.call("peer.add", [
                "node_id": .string(nodeID), "address": .string(address), "direction": .string(direction.rawValue),
                "mode": .string(mode.rawValue),
            ])
            connection.json ? printJSON(.object(result)) : print("added \(text(result["node_id"]))")
        }
    }

    struct Remove: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Stop replicating with a peer and forget it.")
        @OptionGroup var connection: ConnectionOptions
        @Argument var nodeID: String

        func run() throws {
            let result = try connection.call("peer.remove", ["node_id": .string(nodeID)])
            connection.json ? printJSON(.object(result)) : print("removed \(text(result["node_id"]))")
        }
    }

    struct Accept: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Allow a pending peer (one that was refused).")
        @OptionGroup var connection: ConnectionOptions
        @Argument var nodeID: String
        @Argument(help: "Where to dial it (HOST:PORT of its listener); omit or '-' to only accept its connections.")
        var address: String?

        func run() throws {
            let result = try connection.call("peer.accept", ["node_id": .string(nodeID), "address": .string(address ?? "-")])
            connection.json ? printJSON(.object(result)) : print("accepted \(text(result["node_id"]))")
        }
    }
}
