import CanopyCore
import CanopyReplication
import CanopyWire

/// A problem in a config file, reported as `FILE:LINE: what is wrong` (the form compilers use, so
/// editors can jump to it). `line` is 1-based; 0 means the file as a whole.
public struct ConfigError: Error, Equatable, CustomStringConvertible {
    /// The file name as given to the parser.
    public var file: String
    /// The 1-based line, or 0 for the whole file.
    public var line: Int
    /// What is wrong, for a human.
    public var message: String

    /// Creates an error.
    public init(file: String, line: Int, message: String) {
        self.file = file
        self.line = line
        self.message = message
    }

    public var description: String { "\(file):\(line): \(message)" }
}

/// The result of parsing: the configuration and, for each peer section, the lines it spans, which
/// `ConfigEditor` uses to remove or replace a peer without touching the rest of the file.
package struct ParsedConfig: Sendable, Equatable {
    /// The configuration.
    public var config: AgentConfig
    /// Node id → 0-based line range of its `[peer …]` section, from the header through its last
    /// key line (comments and blank lines after it belong to whatever follows).
    public var peerSections: [String: Range<Int>]
    /// Database name → 0-based line range of its `[database …]` section, likewise.
    public var databaseSections: [DatabaseName: Range<Int>] = [:]
    /// Database and node id → 0-based line range of their `[share …]` section, likewise.
    public var shareSections: [ShareKey: Range<Int>] = [:]
}

/// Parses the agent's line-based config format (see `AgentConfig` for the grammar). Pure: it reads
/// only the text it is given.
package struct ConfigParser: Sendable {
    /// Turns a node id as written in the file into its canonical text, or nil if it is not one.
    public typealias NodeIDNormalizer = @Sendable (String) -> String?

    private let file: String
    private let normalizeNodeID: NodeIDNormalizer
    /// The node's own id (canonical text), refused as a `[peer …]` section: the handshake would
    /// refuse the node's connections to itself (`peerNotAuthorized`), as `peer.add` refuses it.
    private let ownNodeID: String?

    /// Creates a parser. `file` is used only in error messages; `ownNodeID`, when given, may not
    /// name a peer.
    public init(file: String, normalizeNodeID: @escaping NodeIDNormalizer, ownNodeID: String? = nil) {
        self.file = file
        self.normalizeNodeID = normalizeNodeID
        self.ownNodeID = ownNodeID
    }

    private enum Section: Equatable {
        case top
        case limits
        case peer(String)
        /// A `[rule NAME]` section: the rule's index in `config.rules`.
        case rule(Int)
        /// A `[database NAME]` section: its index in `config.databases`.
        case database(Int)
        /// A `[share DB NODE-ID]` section: its index in `config.shares`.
        case share(Int)
    }

    /// Parses the whole text; the first problem found is thrown.
    public func parse(_ text: String) throws(ConfigError) -> ParsedConfig {
        guard text.utf8.count <= AgentLimits.configFileBytesMax else {
            throw ConfigError(file: file, line: 0, message: "file exceeds \(AgentLimits.configFileBytesMax) bytes")
        }
        var config = AgentConfig()
        var sections: [String: Range<Int>] = [:]
        var section = Section.top
        var seenKeys: Set<String> = []
        var ruleLines: [Int] = []
        var databaseSections: [DatabaseName: Range<Int>] = [:]
        var shareSections: [ShareKey: Range<Int>] = [:]
        /// The header line of each share, to point at when its database or peer is unknown.
        var shareLines: [Int] = []
        var sharesWithAccess: Set<Int> = []
        /// Rule index → the database its `database` key names, and that key's line.
        var ruleDatabases: [Int: (name: DatabaseName, line: Int)] = [:]
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        for (index, rawLine) in lines.enumerated() {
            let lineNumber = index + 1
            let line = Self.stripComment(rawLine)
            if line.isEmpty { continue }
            if line.hasPrefix("[") {
                section = try parseHeader(line, lineNumber: lineNumber, config: &config)
                if case .peer(let id) = section { sections[id] = index..<index + 1 }
                if case .rule = section { ruleLines.append(lineNumber) }
                if case .database(let database) = section { databaseSections[config.databases[database].name] = index..<index + 1 }
                if case .share(let share) = section {
                    shareSections[ShareKey(config.shares[share].database, config.shares[share].nodeID)] = index..<index + 1
                    shareLines.append(lineNumber)
                }
                seenKeys = []
                continue
            }
            guard let equals = line.firstIndex(of: "=") else {
                throw error(lineNumber, "expected `key = value` or `[section]`, found \"\(line.prefix(60))\"")
            }
            let key = line[..<equals].trimmingSpaces
            let value = line[line.index(after: equals)...].trimmingSpaces
            guard !key.isEmpty else { throw error(lineNumber, "missing key before '='") }
            guard !value.isEmpty else { throw error(lineNumber, "missing value for `\(key)`") }
            guard seenKeys.insert(key).inserted else { throw error(lineNumber, "`\(key)` is set twice in this section") }
            switch section {
            case .top: try applyTop(key, value, lineNumber, &config)
            case .limits: try applyLimit(key, value, lineNumber, &config.limits)
            case .peer(let id):
                try applyPeer(key, value, lineNumber, &config.peers[config.peers.count - 1])
                sections[id] = sections[id]!.lowerBound..<index + 1
            case .rule(let rule):
                if key == "database" {
                    guard let name = DatabaseName(validating: value) else {
                        throw error(lineNumber, DatabaseName.refusal(of: value))
                    }
                    ruleDatabases[rule] = (name, lineNumber)
                } else {
                    try applyRule(key, value, lineNumber, &config.rules[rule])
                }
            case .database(let database):
                try applyDatabase(key, value, lineNumber, &config.databases[database])
                let name = config.databases[database].name
                databaseSections[name] = databaseSections[name]!.lowerBound..<index + 1
            case .share(let share):
                try applyShare(key, value, lineNumber, &config.shares[share])
                if key == "access" { sharesWithAccess.insert(share) }
                let key = ShareKey(config.shares[share].database, config.shares[share].nodeID)
                shareSections[key] = shareSections[key]!.lowerBound..<index + 1
            }
        }
        for (rule, line) in zip(config.rules, ruleLines) {
            guard rule.idPrefix != nil || rule.fieldValue != nil else {
                throw error(line, "rule \(rule.name) needs `prefix`, `value` or both (the `conflicts` setting covers every other document)")
            }
            guard rule.strategy != Self.strategyMissing else { throw error(line, "rule \(rule.name) needs `strategy`") }
        }
        try moveRules(ruleDatabases, &config)
        for (index, (share, line)) in zip(config.shares, shareLines).enumerated() {
            guard sharesWithAccess.contains(index) else {
                throw error(line, "share of \(share.database) with \(share.nodeID) needs `access` (read, write, read-write or none)")
            }
            guard config.database(share.database) != nil else {
                throw error(line, "share of database \(share.database), which has no [database \(share.database)] section")
            }
            guard config.peer(share.nodeID) != nil else {
                throw error(line, "share with \(share.nodeID), which is not a configured peer (add a [peer \(share.nodeID)] section)")
            }
        }
        return ParsedConfig(config: config, peerSections: sections, databaseSections: databaseSections, shareSections: shareSections)
    }

    /// Gives each rule whose `database` key names another database than `default` to that
    /// database, keeping file order.
    private func moveRules(_ ruleDatabases: [Int: (name: DatabaseName, line: Int)], _ config: inout AgentConfig) throws(ConfigError) {
        var kept: [ResolutionRule] = []
        for (index, rule) in config.rules.enumerated() {
            guard let (name, line) = ruleDatabases[index], name != .default else {
                kept.append(rule)
                continue
            }
            guard let database = config.databases.firstIndex(where: { $0.name == name }) else {
                throw error(line, "rule \(rule.name) names database \(name), which has no [database \(name)] section")
            }
            config.databases[database].rules.append(rule)
        }
        config.rules = kept
    }

    private func parseHeader(_ line: String, lineNumber: Int, config: inout AgentConfig) throws(ConfigError) -> Section {
        guard line.hasSuffix("]") else { throw error(lineNumber, "section header must end with ']'") }
        let inner = line.dropFirst().dropLast().trimmingSpaces
        if inner == "limits" { return .limits }
        let words = inner.split(separator: " ", omittingEmptySubsequences: true)
        if words.count == 2, words[0] == "rule" {
            let name = String(words[1])
            guard ResolutionStrategy.isValidResolverName(name) else {
                throw error(lineNumber, "rule name \"\(name.prefix(80))\" must be 1–64 letters, digits, '-', '_' or '.'")
            }
            guard !config.rules.contains(where: { $0.name == name }) else { throw error(lineNumber, "rule \(name) is defined twice") }
            guard config.rules.count < AgentLimits.rulesMax else { throw error(lineNumber, "more than \(AgentLimits.rulesMax) rules") }
            config.rules.append(ResolutionRule(name: name, strategy: Self.strategyMissing))
            return .rule(config.rules.count - 1)
        }
        if words.count == 2, words[0] == "database" {
            guard let name = DatabaseName(validating: words[1]) else {
                throw error(lineNumber, DatabaseName.refusal(of: words[1]))
            }
            guard name != .default else {
                throw error(lineNumber, "the default database has no section: its settings are the top-level revs-limit and conflicts")
            }
            guard !config.databases.contains(where: { $0.name == name }) else { throw error(lineNumber, "database \(name) is defined twice") }
            guard config.databases.count < AgentLimits.databasesMax - 1 else {
                throw error(lineNumber, "more than \(AgentLimits.databasesMax) databases")
            }
            config.databases.append(DatabaseConfig(name: name, revsLimit: config.revsLimit))
            return .database(config.databases.count - 1)
        }
        if words.count == 3, words[0] == "share" {
            guard let database = DatabaseName(validating: words[1]) else {
                throw error(lineNumber, DatabaseName.refusal(of: words[1]))
            }
            guard let id = normalizeNodeID(String(words[2])) else {
                throw error(lineNumber, "\"\(words[2].prefix(80))\" is not a valid node id")
            }
            guard !config.shares.contains(where: { $0.database == database && $0.nodeID == id }) else {
                throw error(lineNumber, "database \(database) is shared with \(id) twice")
            }
            guard config.shares.count < AgentLimits.sharesMax else { throw error(lineNumber, "more than \(AgentLimits.sharesMax) shares") }
            config.shares.append(Share(database: database, nodeID: id, access: Self.accessMissing))
            return .share(config.shares.count - 1)
        }
        guard words.count == 2, words[0] == "peer" else {
            throw error(lineNumber, "unknown section [\(inner)]; expected [limits], [database NAME], [share DB NODE-ID], [peer NODE-ID] or [rule NAME]")
        }
        guard let id = normalizeNodeID(String(words[1])) else {
            throw error(lineNumber, "\"\(words[1].prefix(80))\" is not a valid node id")
        }
        guard id != ownNodeID else {
            throw error(lineNumber, "[peer \(id)] is this node's own id: a node does not replicate with itself; remove the section")
        }
        guard config.peer(id) == nil else { throw error(lineNumber, "peer \(id) is listed twice") }
        guard config.peers.count < AgentLimits.peersMax else {
            throw error(lineNumber, "more than \(AgentLimits.peersMax) peers")
        }
        config.peers.append(PeerConfig(nodeID: id, address: nil))
        return .peer(id)
    }

    private func applyTop(_ key: String, _ value: String, _ line: Int, _ config: inout AgentConfig) throws(ConfigError) {
        switch key {
        case "listen":
            guard let address = HostPort(parsing: value) else { throw error(line, "listen must be HOST:PORT, found \"\(value)\"") }
            config.listen = address
        case "conflicts":
            config.conflicts = try strategy(value, key: key, line: line)
        case "revs-limit":
            config.revsLimit = try integer(value, key: key, in: 2...100_000, line: line)
        case "attachment-size-limit":
            config.attachmentSizeLimit = Int64(try integer(value, key: key, in: 0...999_999_999_999, line: line))
        case "network-key":
            guard value.utf8.count == 64, let bytes = Hex.decode(value) else {
                throw error(line, "network-key must be 64 hex digits (32 bytes; `openssl rand -hex 32` makes one), found \(value.utf8.count) characters")
            }
            config.networkKey = bytes
        default:
            throw error(line, "unknown key `\(key)`; expected listen, conflicts, revs-limit, attachment-size-limit or network-key")
        }
    }

    private func applyLimit(_ key: String, _ value: String, _ line: Int, _ limits: inout ReplicationLimits) throws(ConfigError) {
        switch key {
        case "batch-revisions": limits.batchRevisions = try integer(value, key: key, in: 1...10_000, line: line)
        case "batches-in-flight": limits.batchesInFlight = try integer(value, key: key, in: 1...64, line: line)
        case "heartbeat-seconds": limits.heartbeatSeconds = try integer(value, key: key, in: 1...3600, line: line)
        case "resolver-timeout-seconds": limits.resolverTimeoutSeconds = try integer(value, key: key, in: 1...3600, line: line)
        default:
            throw error(line, "unknown key `\(key)` in [limits]; expected batch-revisions, batches-in-flight, heartbeat-seconds or resolver-timeout-seconds")
        }
    }

    private func applyPeer(_ key: String, _ value: String, _ line: Int, _ peer: inout PeerConfig) throws(ConfigError) {
        switch key {
        case "address":
            if value == "-" { peer.address = nil; return }
            guard let address = HostPort(parsing: value), address.port != 0 else {
                throw error(line, "address must be HOST:PORT with a nonzero port, or \"-\", found \"\(value)\"")
            }
            peer.address = address
        case "direction": peer.direction = try choice(value, of: ReplicationDirection.self, key: key, line: line)
        case "mode": peer.mode = try choice(value, of: ReplicationMode.self, key: key, line: line)
        default:
            throw error(line, "unknown key `\(key)` in a peer section; expected address, direction or mode")
        }
    }

    /// A placeholder for a rule whose section has not set `strategy` yet (no real resolver can be
    /// named this: the name is invalid).
    private static let strategyMissing = ResolutionStrategy.resolver("")

    private func applyRule(_ key: String, _ value: String, _ line: Int, _ rule: inout ResolutionRule) throws(ConfigError) {
        switch key {
        case "prefix": rule.idPrefix = value
        case "value": rule.fieldValue = value
        case "field": rule.field = value
        case "strategy": rule.strategy = try strategy(value, key: key, line: line)
        default:
            throw error(line, "unknown key `\(key)` in a rule section; expected prefix, value, field, strategy or database")
        }
    }

    /// A share's access before its section sets it (`access` is required; `parse` checks).
    private static let accessMissing = ShareAccess.none

    private func applyShare(_ key: String, _ value: String, _ line: Int, _ share: inout Share) throws(ConfigError) {
        switch key {
        case "access": share.access = try choice(value, of: ShareAccess.self, key: key, line: line)
        case "prefix":
            guard value.utf8.count <= WireLimits.docIDBytesMax else {
                throw error(line, "prefix has at most \(WireLimits.docIDBytesMax) bytes")
            }
            share.prefix = value
        default:
            throw error(line, "unknown key `\(key)` in a share section; expected access or prefix")
        }
    }

    private func applyDatabase(_ key: String, _ value: String, _ line: Int, _ database: inout DatabaseConfig) throws(ConfigError) {
        switch key {
        case "revs-limit": database.revsLimit = try integer(value, key: key, in: 2...100_000, line: line)
        case "conflicts": database.conflicts = try strategy(value, key: key, line: line)
        default:
            throw error(line, "unknown key `\(key)` in a database section; expected revs-limit or conflicts")
        }
    }

    private func strategy(_ value: String, key: String, line: Int) throws(ConfigError) -> ResolutionStrategy {
        if let strategy = ResolutionStrategy(parsing: value) { return strategy }
        throw error(line, "\(key) must be automatic, local-wins, remote-wins, merge-json, manual or resolver NAME (NAME: 1–64 letters, digits, '-', '_' or '.'), found \"\(value.prefix(60))\"")
    }

    private func integer(_ value: String, key: String, in range: ClosedRange<Int>, line: Int) throws(ConfigError) -> Int {
        guard value.count <= 12, value.allSatisfy(\.isASCIIDigit), let number = Int(value), range.contains(number) else {
            throw error(line, "\(key) must be an integer from \(range.lowerBound) to \(range.upperBound), found \"\(value.prefix(40))\"")
        }
        return number
    }

    private func choice<T: RawRepresentable & CaseIterable>(
        _ value: String, of type: T.Type, key: String, line: Int
    ) throws(ConfigError) -> T where T.RawValue == String {
        if let result = T(rawValue: value) { return result }
        let options = T.allCases.map(\.rawValue).joined(separator: ", ")
        throw error(line, "\(key) must be one of \(options), found \"\(value.prefix(40))\"")
    }

    private func error(_ line: Int, _ message: String) -> ConfigError {
        ConfigError(file: file, line: line, message: message)
    }

    /// The line without its comment (from the first `#`) and surrounding spaces/tabs/CR.
    /// No value in this format may contain `#`, so no quoting is needed.
    static func stripComment(_ line: Substring) -> String {
        let content = line.firstIndex(of: "#").map { line[..<$0] } ?? line
        return content.trimmingSpaces
    }
}

extension StringProtocol {
    /// The text without leading and trailing spaces, tabs and carriage returns.
    var trimmingSpaces: String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else { return "" }
        return String(self[first...last])
    }
}
