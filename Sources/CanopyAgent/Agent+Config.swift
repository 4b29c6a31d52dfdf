import CanopyAdmin
import CanopyAdmin
import CanopyCore
import CanopyReplication
import Dispatch

/// The running config: reading the file, applying it (at start-up, on `reload` and SIGHUP), and
/// the admin commands that edit its peers. All of it runs on `queue`.
extension Agent {
    /// Re-reads the config file and applies it. A bad file is reported and the running config
    /// kept, so a typo never takes an agent down. `completion` gets the names of the changed
    /// settings that wait for a restart (`restartOnlySettings`), or the error.
    public func reload(_ completion: @escaping @Sendable (Result<[String], AgentError>) -> Void = { _ in }) {
        queue.async { [self] in
            notifier.reloading()
            defer { notifier.ready() }
            do throws(AgentError) {
                let restartRequired = applyConfig(try ConfigFile.read(options.directory.configPath, ownNodeID: identity.nodeID), rescanning: true)
                logger.info("config reloaded: \(config.peers.count) peers")
                events.emit(Admin.ConfigReloaded(peers: Int64(config.peers.count), restartRequired: restartRequired))
                completion(.success(restartRequired))
            } catch {
                logger.error("config reload failed, keeping the running config: \(error)")
                events.emit(Admin.ConfigError(message: error.description))
                completion(.failure(error))
            }
        }
    }

    /// The settings read only at start-up: the listener is bound, the stores opened with their
    /// revs limits and the attachment size limit, and the handshakes keyed, once per process;
    /// `[database NAME]` sections added or removed by hand (`db create` and `db delete` change
    /// them at once).
    static let restartOnlySettings = ["listen", "revs-limit", "databases", "attachment-size-limit", "network-key"]

    /// Applies a parsed config file: peers, limits, `conflicts` and the rules at once, for every
    /// open database (with `rescanning`, a reload's, the conflicts kept so far are scanned again
    /// under the rules);
    /// `listen`, the revs limits and the set of databases keep their running values until a
    /// restart. Returns the names of those that differ in the file (in `restartOnlySettings`
    /// order; empty when none). Runs on `queue`.
    @discardableResult
    func applyConfig(_ file: ConfigFile, rescanning: Bool = false) -> [String] {
        dispatchPrecondition(condition: .onQueue(queue))
        var next = file.parsed.config
        if let listen = options.listen { next.listen = listen }
        let running = Dictionary(uniqueKeysWithValues: config.databases.map { ($0.name, $0) })
        let changed = [
            next.listen != config.listen,
            next.revsLimit != config.revsLimit || next.databases.contains { running[$0.name].map(\.revsLimit) ?? $0.revsLimit != $0.revsLimit },
            Set(next.databases.map(\.name)) != Set(running.keys),
            next.attachmentSizeLimit != config.attachmentSizeLimit,
            next.networkKey != config.networkKey,
        ]
        let restartRequired = zip(Self.restartOnlySettings, changed).filter(\.1).map(\.0)
        if !restartRequired.isEmpty {
            logger.warning("\(restartRequired.joined(separator: ", ")) changed in the config file: restart canopyd to apply")
            next.listen = config.listen
            next.revsLimit = config.revsLimit
            next.attachmentSizeLimit = config.attachmentSizeLimit
            next.networkKey = config.networkKey
            // The running databases, with what the file now says of their conflicts and rules.
            let fromFile = Dictionary(uniqueKeysWithValues: next.databases.map { ($0.name, $0) })
            next.databases = config.databases.map { database in
                guard var updated = fromFile[database.name] else { return database }
                updated.revsLimit = database.revsLimit
                return updated
            }
        }
        configFile = file
        config = next
        inbound.pending.remove(next.peers)
        peers.allow(next.peers)
        replication.apply(config: next)
        let policies = next.databases.map { ($0.name, ConflictPolicy.rules($0.resolutionRules)) }
        storeQueue.async { [self] in
            for (name, policy) in policies where databases[name]?.applyConfiguredPolicy(policy) == false {
                logger.info(
                    "the conflict policy the application set in its process stays in force; the config file's conflicts and rules wait until the node is opened again",
                    metadata: ["db": "\(name)"])
            }
        }
        // Kept conflicts are scanned again, and failed offers made again, on reload only: an edit
        // of the file by a command (a peer added or removed as a library replicator starts or
        // stops) must not settle by the database's rules a conflict that replicator's own
        // resolver kept.
        if listening != nil && rescanning { resolvers.reloaded() }
        return restartRequired
    }

    /// `peer.add` and `peer.accept` (`accepting`: only a pending peer): edit the config file in
    /// place (comments kept), write it atomically, and apply it as a reload would.
    func addPeer(_ settings: Admin.PeerSettings, accepting: Bool) throws(AdminFailure) -> Admin.PeerReply {
        dispatchPrecondition(condition: .onQueue(queue))
        let nodeID = try peerToEdit(settings.nodeID)
        if accepting, !inbound.pending.contains(nodeID) {
            throw AdminFailure(.notFound, "\(nodeID) is not a pending peer")
        }
        // "-" (as in the config file) or no address: accept the peer's connections, never dial.
        var address: HostPort?
        if let text = settings.address, text != "-" {
            guard let parsed = HostPort(parsing: text), parsed.port != 0 else {
                throw AdminFailure(.invalidArgument, "\"address\" must be HOST:PORT or \"-\", found \"\(text.prefix(80))\"")
            }
            address = parsed
        }
        try requireRoom(for: nodeID)
        let peer = PeerConfig(nodeID: nodeID, address: address, direction: settings.direction ?? .both, mode: settings.mode ?? .continuous)
        let text = ConfigEditor.settingPeer(peer, in: configFile.text, parsed: configFile.parsed)
        try commitPeerEdit(text, command: accepting ? Admin.AcceptPeer.name : Admin.AddPeer.name, nodeID: nodeID)
        return Admin.PeerReply(nodeID: nodeID)
    }

    /// `peer.remove`: drops the peer's section and its pending offers.
    func removePeer(_ command: Admin.RemovePeer) throws(AdminFailure) -> Admin.PeerReply {
        dispatchPrecondition(condition: .onQueue(queue))
        let nodeID = try peerToEdit(command.nodeID)
        guard configFile.parsed.peerSections[nodeID] != nil else { throw AdminFailure(.notFound, "\(nodeID) is not a configured peer") }
        let text = ConfigEditor.removingPeer(nodeID, from: configFile.text, parsed: configFile.parsed)
        pendingShares.removeAll(from: nodeID)
        try commitPeerEdit(text, command: Admin.RemovePeer.name, nodeID: nodeID)
        return Admin.PeerReply(nodeID: nodeID)
    }

    /// The canonical form of a node id a peer command names, which must not be this node's.
    private func peerToEdit(_ rawID: String) throws(AdminFailure) -> String {
        guard let nodeID = AgentIdentity.normalizeNodeID(rawID) else {
            throw AdminFailure(.invalidArgument, "\"node_id\" is not a valid node id: \"\(rawID.prefix(80))\"")
        }
        guard nodeID != identity.nodeID else { throw AdminFailure(.invalidArgument, "\(nodeID) is this node") }
        return nodeID
    }

    /// Adds or replaces one peer's section as `peer.add` does (allowed at once, dialled when it
    /// has an address), for an application running the agent in-process. Callable from any
    /// queue; `completion` is called on the agent's queue once the config is written and applied.
    package func setPeer(_ peer: PeerConfig, _ completion: @escaping @Sendable (Result<Void, AdminFailure>) -> Void) {
        queue.async { [self] in
            completion(Result { () throws(AdminFailure) in
                guard let nodeID = AgentIdentity.normalizeNodeID(peer.nodeID) else {
                    throw AdminFailure(.invalidArgument, "not a valid node id: \"\(peer.nodeID.prefix(80))\"")
                }
                guard nodeID != identity.nodeID else { throw AdminFailure(.invalidArgument, "\(nodeID) is this node") }
                try requireRoom(for: nodeID)
                var normalized = peer
                normalized.nodeID = nodeID
                let text = ConfigEditor.settingPeer(normalized, in: configFile.text, parsed: configFile.parsed)
                try commitPeerEdit(text, command: "peer.add", nodeID: nodeID)
            })
        }
    }

    /// Removes one peer's section as `peer.remove` does (its replication stops, its connections
    /// are no longer allowed); a peer not configured is left as it is. Callable from any queue;
    /// `completion` is called on the agent's queue.
    package func removePeer(_ nodeID: String, _ completion: @escaping @Sendable (Result<Void, AdminFailure>) -> Void) {
        queue.async { [self] in
            completion(Result { () throws(AdminFailure) in
                guard let nodeID = AgentIdentity.normalizeNodeID(nodeID), configFile.parsed.peerSections[nodeID] != nil else { return }
                let text = ConfigEditor.removingPeer(nodeID, from: configFile.text, parsed: configFile.parsed)
                pendingShares.removeAll(from: nodeID)
                try commitPeerEdit(text, command: "peer.remove", nodeID: nodeID)
            })
        }
    }

    /// Refuses a new peer beyond `AgentLimits.peersMax` (a configured one may always be edited).
    private func requireRoom(for nodeID: String) throws(AdminFailure) {
        guard config.peers.count < AgentLimits.peersMax || config.peer(nodeID) != nil else {
            throw AdminFailure(.failed, "already \(AgentLimits.peersMax) peers")
        }
    }

    /// Writes the edited config file atomically and applies it as a reload would. On `queue`.
    private func commitPeerEdit(_ text: String, command: String, nodeID: String) throws(AdminFailure) {
        try commitConfigEdit(text, Admin.ConfigChanged(command: command, nodeID: nodeID))
    }

    /// Writes an edited config file atomically, applies it as a reload would, and emits
    /// `changed` (the command and what it changed). On `queue`.
    func commitConfigEdit(_ text: String, _ changed: Admin.ConfigChanged) throws(AdminFailure) {
        dispatchPrecondition(condition: .onQueue(queue))
        let edited: ConfigFile
        do {
            edited = try ConfigFile(text: text, path: options.directory.configPath, ownNodeID: identity.nodeID)
            try DataDirectory.writeFileAtomically(options.directory.configPath, Array(text.utf8), mode: 0o600)
        } catch {
            throw AdminFailure(.failed, "cannot update the config file: \(error)")
        }
        applyConfig(edited)
        events.emit(changed)
    }
}

/// The config file as the agent last read or wrote it: its text, which `peer.add`, `peer.accept`
/// and `peer.remove` edit in place (`ConfigEditor`), and that text parsed. The config in force is
/// the agent's `config`, which keeps the restart-only settings it started with.
struct ConfigFile {
    let text: String
    let parsed: ParsedConfig

    /// Parses `text`, which is (or is about to be) the file at `path` of the node `ownNodeID`
    /// (which no `[peer …]` section may name).
    init(text: String, path: String, ownNodeID: String) throws(ConfigError) {
        self.text = text
        parsed = try ConfigParser(file: path, normalizeNodeID: AgentIdentity.normalizeNodeID, ownNodeID: ownNodeID).parse(text)
    }

    /// Reads and parses the file at `path` (at most `AgentLimits.configFileBytesMax`, UTF-8) of
    /// the node `ownNodeID`.
    static func read(_ path: String, ownNodeID: String) throws(AgentError) -> ConfigFile {
        let bytes = try DataDirectory.readFile(path, limit: AgentLimits.configFileBytesMax)
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw .config(ConfigError(file: path, line: 0, message: "file is not UTF-8"))
        }
        do {
            return try ConfigFile(text: text, path: path, ownNodeID: ownNodeID)
        } catch {
            throw .config(error)
        }
    }
}
