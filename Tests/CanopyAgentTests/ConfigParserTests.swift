import CanopyAgent
import CanopyCore
import CanopyCrypto
import Foundation
import Testing

/// A valid node id in its printed form, derived from a fixed seed byte.
func testNodeID(_ seed: UInt8) -> String {
    var entropy = DeterministicEntropy(seed: [UInt8](repeating: seed, count: DeterministicEntropy.seedBytes))
    return Identity.generate(random: &entropy).nodeID.description
}

let nodeA = testNodeID(1)
/// `nodeA` with its last character (a check character) changed.
let corruptedNodeID = String(nodeA.dropLast()) + (nodeA.last == "A" ? "B" : "A")
let nodeB = testNodeID(2)

private func parse(_ text: String) throws(ConfigError) -> ParsedConfig {
    try ConfigParser(file: "canopy.conf", normalizeNodeID: AgentIdentity.normalizeNodeID).parse(text)
}

private func error(in text: String) -> ConfigError? {
    do { _ = try parse(text) } catch { return error }
    return nil
}

@Suite("config file parsing")
struct ConfigParserTests {
    @Test("an empty file gives the defaults")
    func emptyFileGivesDefaults() throws {
        let parsed = try parse("")
        #expect(parsed.config == AgentConfig())
        #expect(parsed.config.listen == HostPort(host: "127.0.0.1", port: 4987))
    }

    @Test("every setting, section and comment is read")
    func everySettingIsRead() throws {
        let text = """
            # top comment
            listen = [::1]:0   # any port
            conflicts = manual
            revs-limit = 50

            [limits]
            batch-revisions = 20
            batches-in-flight = 2
            heartbeat-seconds = 5

            [peer \(nodeA.lowercased().replacingOccurrences(of: "-", with: ""))]
            address = 10.0.0.1:4987
            direction = push
            mode = once

            [peer \(nodeB)]
            address = -
            """
        let config = try parse(text).config
        #expect(config.listen == HostPort(host: "::1", port: 0))
        #expect(config.conflicts == .manual)
        #expect(config.revsLimit == 50)
        #expect(config.limits == ReplicationLimits(batchRevisions: 20, batchesInFlight: 2, heartbeatSeconds: 5))
        #expect(config.peers == [
            PeerConfig(nodeID: nodeA, address: HostPort(host: "10.0.0.1", port: 4987), direction: .push, mode: .once),
            PeerConfig(nodeID: nodeB, address: nil, direction: .both, mode: .continuous),
        ])
    }

    @Test("errors name the file and the line", arguments: [
        ("listen = nowhere", 1, "listen must be HOST:PORT"),
        ("\n\nconflicts = sometimes", 3, "conflicts must be automatic, local-wins, remote-wins, merge-json, manual or resolver NAME"),
        ("revs-limit = 1", 1, "revs-limit must be an integer from 2 to 100000"),
        ("revs-limit = 12abc", 1, "revs-limit must be an integer"),
        ("colour = blue", 1, "unknown key `colour`"),
        ("[limits]\nwindow = 3", 2, "unknown key `window` in [limits]"),
        ("[peer NOTANODE]", 1, "is not a valid node id"),
        ("[peers]", 1, "unknown section [peers]"),
        ("[limits", 1, "must end with ']'"),
        ("listen", 1, "expected `key = value`"),
        ("listen =", 1, "missing value for `listen`"),
        ("conflicts = manual\nconflicts = automatic", 2, "is set twice"),
        ("[peer \(testNodeID(1))]\naddress = 1.2.3.4:0", 2, "nonzero port"),
        ("[peer \(testNodeID(1))]\n[peer \(testNodeID(1).lowercased())]", 2, "listed twice"),
        ("[peer \(corruptedNodeID)]", 1, "is not a valid node id"),
    ])
    func errorsNameFileAndLine(text: String, line: Int, message: String) {
        let found = error(in: text)
        #expect(found?.file == "canopy.conf")
        #expect(found?.line == line)
        #expect(found?.message.contains(message) == true, "\(String(describing: found))")
        #expect(found?.description.hasPrefix("canopy.conf:\(line): ") == true)
    }

    @Test("a peer section naming the node's own id, in any spelling, is refused at its header; other peers are not")
    func ownNodeIsNoPeer() throws {
        let parser = ConfigParser(file: "canopy.conf", normalizeNodeID: AgentIdentity.normalizeNodeID, ownNodeID: nodeA)
        #expect(throws: ConfigError(
            file: "canopy.conf", line: 3,
            message: "[peer \(nodeA)] is this node's own id: a node does not replicate with itself; remove the section")) {
            try parser.parse("[peer \(nodeB)]\n\n[peer \(nodeA.lowercased().replacingOccurrences(of: "-", with: ""))]\naddress = 127.0.0.1:9")
        }
        #expect(try parser.parse("[peer \(nodeB)]").config.peers.map(\.nodeID) == [nodeB])
    }

    @Test("HOST:PORT parsing accepts names, IPv4 and bracketed IPv6, and nothing else")
    func hostPortParsing() {
        #expect(HostPort(parsing: "example.org:80") == HostPort(host: "example.org", port: 80))
        #expect(HostPort(parsing: "[fe80::1]:443")?.description == "[fe80::1]:443")
        for bad in ["::1:80", "host", ":80", "host:", "host:65536", "host:-1", "host:８０", "[::1]80", "a b:1"] {
            #expect(HostPort(parsing: bad) == nil, "\(bad)")
        }
    }

    @Test("a rendered config parses back to the same config")
    func renderRoundTrips() throws {
        let config = AgentConfig(
            listen: HostPort(host: "0.0.0.0", port: 5000), conflicts: .manual, revsLimit: 77,
            limits: ReplicationLimits(batchRevisions: 9, batchesInFlight: 3, heartbeatSeconds: 60),
            peers: [PeerConfig(nodeID: nodeA, address: HostPort(host: "h", port: 1), direction: .pull, mode: .once)])
        #expect(try parse(ConfigEditor.render(config)).config == config)
        var keyed = config
        keyed.networkKey = Array(0..<32)
        #expect(try parse(ConfigEditor.render(keyed)).config == keyed)
        #expect(throws: ConfigError.self) { try parse("network-key = 00ff\n") }
    }

    @Test("adding and removing a peer keeps every other line, comments included")
    func peerEditsKeepOtherLines() throws {
        let original = """
            # my agent
            listen = 127.0.0.1:4987  # keep me

            [peer \(nodeA)]
            address = 10.0.0.1:1
            # trailing comment
            """
        let peerB = PeerConfig(nodeID: nodeB, address: HostPort(host: "10.0.0.2", port: 2), direction: .pull)
        let added = ConfigEditor.settingPeer(peerB, in: original, parsed: try parse(original))
        #expect(added.hasPrefix(original))
        #expect(try parse(added).config.peers.map(\.nodeID) == [nodeA, nodeB])

        let removed = ConfigEditor.removingPeer(nodeA, from: added, parsed: try parse(added))
        #expect(removed.contains("# my agent"))
        #expect(removed.contains("listen = 127.0.0.1:4987  # keep me"))
        #expect(removed.contains("# trailing comment"))
        #expect(try parse(removed).config.peers == [peerB])

        let changed = PeerConfig(nodeID: nodeB, address: nil, direction: .push, mode: .once)
        let replaced = ConfigEditor.settingPeer(changed, in: removed, parsed: try parse(removed))
        #expect(try parse(replaced).config.peers == [changed])
    }

    @Test("database sections give each database its revs limit, conflicts and the rules that name it")
    func databaseSections() throws {
        let parsed = try parse("""
            revs-limit = 300
            conflicts = manual
            [rule notes-merge]
            prefix = note:
            strategy = merge-json
            database = team/notes
            [rule everywhere]
            value = task
            strategy = remote-wins
            [database team/notes]
            conflicts = local-wins
            [database archive]
            revs-limit = 10
            """)
        let config = parsed.config
        #expect(config.rules.map(\.name) == ["everywhere"])
        let notes = try #require(config.database(DatabaseName(validating: "team/notes")!))
        #expect(notes.revsLimit == 300 && notes.conflicts == .localWins && notes.rules.map(\.name) == ["notes-merge"])
        let archive = try #require(config.database(DatabaseName(validating: "archive")!))
        #expect(archive.revsLimit == 10 && archive.conflicts == .automatic && archive.rules.isEmpty)
        #expect(config.database(.default)?.conflicts == .manual)
        #expect(config.allDatabases.map(\.name.text) == ["default", "team/notes", "archive"])
        #expect(parsed.databaseSections[DatabaseName(validating: "archive")!] == 11..<13)  // 0-based: header and its key
    }

    @Test("database errors name the line and the rule broken; any database may keep its conflicts for a resolver", arguments: [
        ("[database Notes]", 1, "is not a database name: a database name starts with a lowercase letter"),
        ("[database default]", 1, "the default database has no section"),
        ("[database a]\n[database a]", 2, "database a is defined twice"),
        ("[database a]\nbatch = 1", 2, "unknown key `batch` in a database section"),
        ("[rule r]\nprefix = x\nstrategy = manual\ndatabase = nowhere", 4, "rule r names database nowhere, which has no [database nowhere] section"),
        ("[rule r]\nprefix = x\nstrategy = manual\ndatabase = No", 4, "is not a database name"),
        ("[database a]\nconflicts = resolver notes", 0, ""),
        ("[database a]\n[rule r]\ndatabase = a\nprefix = x\nstrategy = resolver notes", 0, ""),
    ])
    func databaseErrors(text: String, line: Int, message: String) throws {
        guard line > 0 else {
            #expect(error(in: text) == nil)
            return
        }
        let problem = try #require(error(in: text))
        #expect(problem.line == line && problem.message.contains(message), "\(problem)")
    }

    @Test("adding and removing a database section keeps every other line, and a rendered config with databases parses back")
    func databaseEdits() throws {
        let original = "# mine\nlisten = 127.0.0.1:4987\n\n[peer \(nodeA)]\naddress = -\n"
        let notes = DatabaseConfig(name: DatabaseName(validating: "notes")!, revsLimit: 40, conflicts: .mergeJSON)
        let added = ConfigEditor.addingDatabase(notes, to: original, parsed: try parse(original))
        #expect(added.hasPrefix(original))
        #expect(try parse(added).config.databases == [notes])
        let removed = ConfigEditor.removingDatabase(notes.name, from: added, parsed: try parse(added))
        #expect(try parse(removed).config == (try parse(original)).config)
        #expect(removed.contains("# mine"))

        let config = AgentConfig(peers: [PeerConfig(nodeID: nodeA, address: nil)])
        var withDatabases = config
        withDatabases.databases = [notes]
        #expect(try parse(ConfigEditor.render(withDatabases)).config == withDatabases)
    }
}
