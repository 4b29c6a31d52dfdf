import CanopyCore
import CanopyReplication
import CanopyStore

/// The agent's configuration, as read from `DIR/canopy.conf`.
///
/// The file format (documented in Tools/canopyd/README.md, "The config file"):
///
/// ```
/// # comment lines start with '#'; blank lines are ignored
/// listen = 127.0.0.1:4987          # HOST:PORT, port 0 picks a free port
/// conflicts = automatic            # the catch-all: automatic | local-wins | remote-wins |
///                                  #   merge-json | manual | resolver NAME
/// revs-limit = 1000                # ancestors kept per leaf
/// attachment-size-limit = 4294967296  # bytes one attachment may hold (default 4 GiB)
/// network-key = 64 hex digits      # a private mesh's shared key (default: the open key)
///
/// [rule NAME]                      # resolution rules, in file order, first match wins
/// prefix = note:                   # documents whose id starts with this, and/or
/// value = note                     # whose body's `field` holds this string
/// field = type                     # the body member `value` is compared with (default type)
/// strategy = merge-json            # as `conflicts`
/// database = notes                 # the database the rule settles (default: default)
///
/// [database NAME]                  # one section per database besides `default`
/// revs-limit = 1000                # as above, for this database (default: the top-level one)
/// conflicts = automatic            # as above, for this database (default: automatic)
///
/// [limits]
/// batch-revisions = 500            # revisions per replication batch
/// batches-in-flight = 4            # pipelined batches per database and peer (at most 16 are used)
/// heartbeat-seconds = 30           # idle connections send a heartbeat this often
/// resolver-timeout-seconds = 10    # a resolver client's time to answer one offer
///
/// [share DB NODE-ID]               # what a peer may do to this node's copy of DB
/// access = read-write              # read (it may pull) | write (it may push) | read-write | none
/// prefix = note:                   # only documents whose id starts with this (default: all)
///
/// [peer NODE-ID]                   # one section per allowed peer
/// address = 192.0.2.7:4987         # where to dial it; "-" or absent: never dial, accept only
/// direction = both                 # push | pull | both
/// mode = continuous                # continuous | once
/// ```
///
/// Invariants: peers are unique by node id and kept in file order; every numeric value is within
/// the range `ConfigParser` enforces.
public struct AgentConfig: Sendable, Equatable {
    /// Where the agent listens for peers. Port 0 asks the kernel for a free port.
    public var listen: HostPort
    /// How a conflict no rule covers is settled (the `conflicts` setting).
    public var conflicts: ResolutionStrategy
    /// Resolution rules (`[rule NAME]` sections) of the `default` database, in file order.
    public var rules: [ResolutionRule]
    /// The databases besides `default` (`[database NAME]` sections), in file order.
    public var databases: [DatabaseConfig] = []
    /// Revision ancestors kept per leaf.
    public var revsLimit: Int
    /// The most bytes one attachment may hold; larger content is refused before any of it is
    /// stored (`attachment-size-limit`).
    public var attachmentSizeLimit: Int64 = AttachmentStore.defaultSizeLimit
    /// Replication tuning.
    public var limits: ReplicationLimits
    /// Allowed peers, in file order.
    public var peers: [PeerConfig]
    /// What peers may do to this node's databases (`[share DB NODE-ID]` sections), in file order.
    public var shares: [Share] = []
    /// The 32-byte network key the handshake proves (`network-key`; `Protocol/replication-v1.md`
    /// §4.4): only agents configured with the same key complete a handshake with this one. Nil:
    /// the open key every agent without one uses.
    public var networkKey: [UInt8]?

    /// The defaults `canopyd init` writes.
    public static let defaultListen = HostPort(host: "127.0.0.1", port: 4987)
    /// The default revs limit (`Protocol/design.md` §2.7).
    public static let defaultRevsLimit = 1000

    /// Creates a configuration.
    public init(
        listen: HostPort = AgentConfig.defaultListen, conflicts: ResolutionStrategy = .automatic,
        rules: [ResolutionRule] = [], revsLimit: Int = AgentConfig.defaultRevsLimit,
        limits: ReplicationLimits = ReplicationLimits(), peers: [PeerConfig] = []
    ) {
        self.listen = listen
        self.conflicts = conflicts
        self.rules = rules
        self.revsLimit = revsLimit
        self.limits = limits
        self.peers = peers
    }

    /// The peer with this node id, if configured.
    public func peer(_ nodeID: String) -> PeerConfig? {
        peers.first { $0.nodeID == nodeID }
    }

    /// The database named `name`: `default` from the top-level settings, any other from its
    /// section; nil when there is none.
    public func database(_ name: DatabaseName) -> DatabaseConfig? {
        if name == .default { return DatabaseConfig(name: .default, revsLimit: revsLimit, conflicts: conflicts, rules: rules) }
        return databases.first { $0.name == name }
    }

    /// What `nodeID` may do to this node's copy of `database`: its `[share …]` section, or for
    /// `default` without one, the peer's `direction` (pushing to it lets it read, pulling from it
    /// lets it write). Nil when it may do nothing (no share, or not a configured peer).
    public func share(of database: DatabaseName, with nodeID: String) -> Share? {
        sharing.share(of: database, with: nodeID)
    }

    /// The databases `nodeID` may read or write, with its rights, in `allDatabases` order.
    public func shares(with nodeID: String) -> [Share] {
        sharing.shares(with: nodeID, among: allDatabases.map(\.name))
    }

    /// What the config lets each peer do to each database (`Sharing`).
    public var sharing: Sharing {
        Sharing(shares: shares, defaultDirections: Dictionary(peers.map { ($0.nodeID, $0.direction) }, uniquingKeysWith: { first, _ in first }))
    }

    /// Every database, `default` first, then the others in file order.
    public var allDatabases: [DatabaseConfig] {
        [database(.default)!] + databases
    }
}

extension AgentConfig {
    /// The rules and the catch-all as the store applies them.
    public var resolutionRules: ResolutionRules {
        ResolutionRules(rules, fallback: conflicts)
    }
}

/// One database's settings: `default`'s are the file's top-level `revs-limit` and `conflicts`
/// and the rules without a `database` key; another's are its `[database NAME]` section and the
/// rules that name it.
public struct DatabaseConfig: Sendable, Equatable {
    /// The database's name.
    public var name: DatabaseName
    /// Revision ancestors kept per leaf.
    public var revsLimit: Int
    /// How a conflict no rule covers is settled.
    public var conflicts: ResolutionStrategy
    /// Its resolution rules, in file order.
    public var rules: [ResolutionRule]

    /// Creates a database's settings.
    public init(name: DatabaseName, revsLimit: Int = AgentConfig.defaultRevsLimit, conflicts: ResolutionStrategy = .automatic,
                rules: [ResolutionRule] = []) {
        self.name = name
        self.revsLimit = revsLimit
        self.conflicts = conflicts
        self.rules = rules
    }

    /// The rules and the catch-all as the store applies them.
    public var resolutionRules: ResolutionRules {
        ResolutionRules(rules, fallback: conflicts)
    }
}

/// Replication tuning from the `[limits]` section.
public struct ReplicationLimits: Sendable, Equatable {
    /// Revisions per batch.
    public var batchRevisions: Int = 500
    /// Batches in flight per peer (the pipelining window).
    /// The default, 4 batches of 500, keeps a change in one database from waiting behind more than
    /// a few batches of another on the same connection (Tools/canopy-bench/README.md, *databases*) and measured as fast
    /// as 16 for one database on loopback; a link with a long round trip may want more.
    public var batchesInFlight: Int = 4
    /// Heartbeat interval on idle connections.
    public var heartbeatSeconds: Int = 30
    /// Seconds a resolver client has to answer one offer before the conflict is kept
    /// (`resolution.failed`); it is offered again after as long, doubled after each further
    /// timeout, at most `AgentLimits.resolverRetryMaximumSeconds`.
    public var resolverTimeoutSeconds: Int = 10

    /// Creates limits with the defaults.
    public init(batchRevisions: Int = 500, batchesInFlight: Int = 4, heartbeatSeconds: Int = 30, resolverTimeoutSeconds: Int = 10) {
        self.batchRevisions = batchRevisions
        self.batchesInFlight = batchesInFlight
        self.heartbeatSeconds = heartbeatSeconds
        self.resolverTimeoutSeconds = resolverTimeoutSeconds
    }
}

/// One allowed peer.
public struct PeerConfig: Sendable, Equatable {
    /// The peer's node id, in the canonical text form.
    public var nodeID: String
    /// Where to dial it; nil means this node only accepts its connections.
    public var address: HostPort?
    /// Which way documents flow.
    public var direction: ReplicationDirection
    /// Continuous or one-shot.
    public var mode: ReplicationMode

    /// Creates a peer entry.
    public init(
        nodeID: String, address: HostPort?, direction: ReplicationDirection = .both,
        mode: ReplicationMode = .continuous
    ) {
        self.nodeID = nodeID
        self.address = address
        self.direction = direction
        self.mode = mode
    }
}

/// A `HOST:PORT` pair. IPv6 hosts are written in brackets: `[::1]:4987`.
public struct HostPort: Sendable, Hashable, CustomStringConvertible {
    /// A host name or numeric address, without brackets.
    public var host: String
    /// The TCP port; 0 only makes sense for listening.
    public var port: UInt16

    /// Creates a host and port.
    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    /// Parses `HOST:PORT` or `[V6]:PORT`; nil if malformed. The host may not be empty.
    public init?(parsing text: some StringProtocol) {
        let text = String(text)
        let hostPart: Substring
        let portPart: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            hostPart = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { return nil }
            portPart = rest.dropFirst()
        } else {
            guard let colon = text.lastIndex(of: ":") else { return nil }
            hostPart = text[..<colon]
            portPart = text[text.index(after: colon)...]
            if hostPart.contains(":") { return nil }  // a bare IPv6 address needs brackets
        }
        guard !hostPart.isEmpty, !hostPart.contains(where: { $0 == " " || $0 == "\t" }),
            !portPart.isEmpty, portPart.allSatisfy(\.isASCIIDigit), portPart.count <= 5,
            let port = UInt16(portPart)
        else { return nil }
        self.host = String(hostPart)
        self.port = port
    }

    /// `HOST:PORT`, with brackets around an IPv6 host.
    public var description: String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }
}

extension Character {
    /// True for the ASCII digits 0–9 only (not other Unicode digits).
    var isASCIIDigit: Bool { ("0"..."9").contains(self) }
}
