import ArgumentParser
import CanopyAdmin
import CanopyReplication
import CanopyCore

struct Peers: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Configured peers, and pending ones (refused unknown node ids).")
    @OptionGroup var connection: ConnectionOptions

    func run() throws {
        let answer = try connection.call(Admin.Peers())
        if connection.json { return printJSON(.object(answer.members)) }
        printPeerTable(answer.reply.peers)
        printDatabaseTable(answer.reply.peers)
        let pending = answer.reply.pending
        if !pending.isEmpty {
            // The address a pending node connected from is its side of that connection (usually
            // an ephemeral port), not where it listens: accepting it without an address lets it
            // connect; add its listening address with `peer add` if this node should dial it.
            print("\npending (refused unknown nodes; allow one with `canopyctl peer accept NODEID`):")
            printTable(["NODE ID", "CONNECTED FROM", "ATTEMPTS"], pending.map { [$0.nodeID, $0.address, text($0.attempts)] })
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
            let answer = try connection.call(Admin.AddPeer(Admin.PeerSettings(
                nodeID: nodeID, address: address, direction: ReplicationDirection(rawValue: direction.rawValue),
                mode: ReplicationMode(rawValue: mode.rawValue))))
            connection.json ? printJSON(.object(answer.members)) : print("added \(answer.reply.nodeID)")
        }
    }

    struct Remove: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Stop replicating with a peer and forget it.")
        @OptionGroup var connection: ConnectionOptions
        @Argument var nodeID: String

        func run() throws {
            let answer = try connection.call(Admin.RemovePeer(nodeID: nodeID))
            connection.json ? printJSON(.object(answer.members)) : print("removed \(answer.reply.nodeID)")
        }
    }

    struct Accept: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Allow a pending peer (one that was refused).")
        @OptionGroup var connection: ConnectionOptions
        @Argument var nodeID: String
        @Argument(help: "Where to dial it (HOST:PORT of its listener); omit or '-' to only accept its connections.")
        var address: String?

        func run() throws {
            let answer = try connection.call(Admin.AcceptPeer(Admin.PeerSettings(nodeID: nodeID, address: address ?? "-")))
            connection.json ? printJSON(.object(answer.members)) : print("accepted \(answer.reply.nodeID)")
        }
    }
}
