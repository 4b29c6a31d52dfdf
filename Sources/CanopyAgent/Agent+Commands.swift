import CanopyCore
import CanopyReplication
import CanopyStore
import Dispatch
import Foundation

/// The reply callback every command gets; called exactly once.
typealias AdminReply = @Sendable (Result<[String: JSONValue], AdminFailure>) -> Void

/// Admin commands: the table from `cmd` to handler (Protocol/admin-v1.md §6). Handlers for the
/// agent's own state run on `queue`; document handlers run on `storeQueue`.
extension Agent: AdminRequestHandler {
    /// Every command name, for `unknown_command` messages and the spec test.
    public static let commandNames: [String] = [
        "backup", "bulk_docs", "changes", "check", "conflicts", "delete", "events", "export", "get", "import", "peer.accept", "peer.add",
        "peer.remove", "peers", "put", "reload", "resolve", "resolver.answer", "resolver.register", "shutdown",
        "stats", "status", "sync",
    ]

    /// Commands that change state; each is logged (the socket admits only the agent's own uid, so
    /// the log records what was done, not who).
    static let mutatingCommands: Set<String> = [
        "backup", "bulk_docs", "delete", "import", "peer.accept", "peer.add", "peer.remove", "put", "reload", "resolve", "resolver.register",
        "shutdown", "sync",
    ]

    func handle(_ request: AdminRequest, client: AdminClient, reply: @escaping AdminReply) {
        if Self.mutatingCommands.contains(request.command) {
            let target = ["doc", "node_id", "path"].compactMap { key -> String? in
                if case .string(let value)? = request.arguments[key] { return "\(key)=\(value.prefix(80))" }
                return nil
            }
            logger.info("admin \(request.command) \(target.joined(separator: " "))")
        }
        switch request.command {
        case "status": onQueue(reply) { self.status(reply) }
        case "peers": onQueue(reply) { self.peerList(reply) }
        case "peer.add", "peer.accept", "peer.remove": onQueue(reply) { try self.editPeers(request, reply) }
        case "put", "get", "delete", "conflicts", "resolve", "changes", "import", "export", "stats", "bulk_docs":
            storeQueue.async { reply(self.documentCommand(request)) }
        case "sync": onQueue(reply) { try self.sync(request, reply) }
        case "backup": onQueue(reply) { try self.backup(request, reply) }
        case "check": check(reply)
        case "reload":
            reload { result in
                reply(result.map { ["restart_required": .array($0.map(JSONValue.string))] }.mapError { AdminFailure(.failed, $0.description) })
            }
        case "shutdown":
            // The connection stays open until the shutdown has finished (replication stopped and
            // checkpointed); the client then waits for the lock to be free (`AgentExitWait`).
            reply(.success(["lock_path": .string(options.directory.lockPath)]))
            shutdown {}
        case "events": onQueue(reply) { try self.subscribe(request, client: client, reply) }
        case "resolver.register", "resolver.answer": onQueue(reply) { try self.resolverCommand(request, client: client, reply) }
        default:
            reply(.failure(AdminFailure(
                .unknownCommand, "unknown command \"\(request.command.prefix(80))\"; commands: \(Self.commandNames.joined(separator: ", "))")))
        }
    }

    /// Runs `body` on `queue`; an `AdminFailure` it throws becomes the reply.
    private func onQueue(_ reply: @escaping AdminReply, _ body: @escaping @Sendable () throws -> Void) {
        queue.async {
            do {
                try body()
            } catch let failure as AdminFailure {
                reply(.failure(failure))
            } catch {
                reply(.failure(AdminFailure(.failed, "\(error)")))
            }
        }
    }

    private func status(_ reply: @escaping AdminReply) {
        dispatchPrecondition(condition: .onQueue(queue))
        let base: [String: JSONValue] = [
            "node_id": .string(identity.nodeID),
            "listen": .string(boundListen?.description ?? config.listen.description),
            "admin_socket": .string(admin?.path ?? ""),
            "data_dir": .string(options.directory.path),
            "conflicts": .string(config.conflicts.rawValue),
            "uptime_seconds": .double((Self.wallClock() - startedAt).rounded()),
        ].merging(damageStatus) { first, _ in first }
        peerRows { rows in
            self.storeQueue.async {
                do throws(StoreError) {
                    var result = try self.storeCounts().merging(base) { store, _ in store }
                    result["peers"] = .array(rows)
                    reply(.success(result))
                } catch {
                    reply(.failure(Self.failure(for: error)))
                }
            }
        }
    }

    private func peerList(_ reply: @escaping AdminReply) {
        dispatchPrecondition(condition: .onQueue(queue))
        let pending = pendingPeers.values.sorted { $0.nodeID < $1.nodeID }.map { record in
            JSONValue.object([
                "node_id": .string(record.nodeID), "address": .string(record.address),
                "attempts": .int(Int64(record.attempts)), "last_seen": .double(record.lastSeen),
            ])
        }
        peerRows { rows in reply(.success(["peers": .array(rows), "pending": .array(pending)])) }
    }

    /// One row per configured peer (file order), merged with the replication status and the
    /// connection state. Calls `completion` on `queue`.
    private func peerRows(_ completion: @escaping @Sendable ([JSONValue]) -> Void) {
        let configured = config.peers
        replication.statuses { statuses in
            self.queue.async {
                completion(configured.map { peer in
                    let status = statuses.first { $0.nodeID == peer.nodeID }
                    return Self.peerRow(peer, status: status, connected: status?.connected == true)
                })
            }
        }
    }

    static func peerRow(_ peer: PeerConfig, status: PeerReplicationStatus?, connected: Bool) -> JSONValue {
        let optional: (Int64?) -> JSONValue = { $0.map(JSONValue.int) ?? .null }
        return .object([
            "node_id": .string(peer.nodeID),
            "address": peer.address.map { .string($0.description) } ?? .null,
            "direction": .string(peer.direction.rawValue),
            "mode": .string(peer.mode.rawValue),
            "connected": .bool(connected),
            "state": .string((status?.state ?? .stopped).rawValue),
            "last_pushed_seq": optional(status?.lastPushedSequence),
            "last_pulled_seq": optional(status?.lastPulledSequence),
            "pending": optional(status?.pendingCount),
            "progress": .object([
                "completed": .int(Int64(status?.progress.completed ?? 0)),
                "total": .int(Int64(status?.progress.total ?? 0)),
            ]),
            "last_error": status?.lastError.map(JSONValue.string) ?? .null,
            "rejected": .int(status?.rejected ?? 0),
            "last_rejection": status?.lastRejection.map(JSONValue.string) ?? .null,
            "refused_by_peer": .int(status?.refusedByPeer ?? 0),
            "last_refused_by_peer": status?.lastRefusedByPeer.map(JSONValue.string) ?? .null,
        ])
    }

    /// `peer.add`, `peer.accept`, `peer.remove`: edit the config file in place (comments kept),
    /// write it atomically, and apply it as a reload would.
    private func editPeers(_ request: AdminRequest, _ reply: @escaping AdminReply) throws(AdminFailure) {
        dispatchPrecondition(condition: .onQueue(queue))
        let rawID = try request.string("node_id")
        guard let nodeID = AgentIdentity.normalizeNodeID(rawID) else {
            throw AdminFailure(.invalidArgument, "\"node_id\" is not a valid node id: \"\(rawID.prefix(80))\"")
        }
        guard nodeID != identity.nodeID else { throw AdminFailure(.invalidArgument, "\(nodeID) is this node") }
        var text: String
        switch request.command {
        case "peer.remove":
            guard parsedConfig.peerSections[nodeID] != nil else { throw AdminFailure(.notFound, "\(nodeID) is not a configured peer") }
            text = ConfigEditor.removingPeer(nodeID, from: configText, parsed: parsedConfig)
        default:
            if request.command == "peer.accept", pendingPeers[nodeID] == nil {
                throw AdminFailure(.notFound, "\(nodeID) is not a pending peer")
            }
            // "-" (as in the config file) or no address: accept the peer's connections, never dial.
            let address = try request.optionalString("address").flatMap { (text) throws(AdminFailure) -> HostPort? in
                if text == "-" { return nil }
                guard let address = HostPort(parsing: text), address.port != 0 else {
                    throw AdminFailure(.invalidArgument, "\"address\" must be HOST:PORT or \"-\", found \"\(text.prefix(80))\"")
                }
                return address
            }
            guard config.peers.count < AgentLimits.peersMax || config.peer(nodeID) != nil else {
                throw AdminFailure(.failed, "already \(AgentLimits.peersMax) peers")
            }
            let peer = PeerConfig(
                nodeID: nodeID, address: address, direction: try request.choice("direction", ReplicationDirection.self, default: .both),
                mode: try request.choice("mode", ReplicationMode.self, default: .continuous))
            text = ConfigEditor.settingPeer(peer, in: configText, parsed: parsedConfig)
        }
        let parsed: ParsedConfig
        do {
            parsed = try ConfigParser(file: options.directory.configPath, normalizeNodeID: AgentIdentity.normalizeNodeID).parse(text)
            try DataDirectory.writeFileAtomically(options.directory.configPath, Array(text.utf8), mode: 0o600)
        } catch {
            throw AdminFailure(.failed, "cannot update the config file: \(error)")
        }
        applyConfig(text: text, parsed: parsed)
        emit("config.changed", ["command": .string(request.command), "node_id": .string(nodeID)])
        reply(.success(["node_id": .string(nodeID)]))
    }

    /// `sync`: a one-shot replication with a peer. With `wait`, the reply comes when it is done
    /// and progress goes out as `sync.progress` events; without, the reply is immediate.
    private func sync(_ request: AdminRequest, _ reply: @escaping AdminReply) throws(AdminFailure) {
        let rawID = try request.string("node_id")
        guard let nodeID = AgentIdentity.normalizeNodeID(rawID), config.peer(nodeID) != nil else {
            throw AdminFailure(.notFound, "\"\(rawID.prefix(80))\" is not a configured peer")
        }
        let wait = try request.bool("wait")
        let once = ReplyOnce(reply)
        // Without `wait` the reply says it started, before the sync can finish and answer first.
        if !wait { once.reply(.success(["node_id": .string(nodeID), "started": .bool(true)])) }
        let progress: @Sendable (ReplicationProgress) -> Void = { [weak self] progress in
            self?.emit("sync.progress", [
                "node_id": .string(nodeID), "completed": .int(Int64(progress.completed)), "total": .int(Int64(progress.total)),
            ])
        }
        replication.sync(peer: nodeID, progress: progress) { [weak self] result in
            switch result {
            case .success(let done):
                let result: [String: JSONValue] = [
                    "node_id": .string(nodeID), "completed": .int(Int64(done.completed)), "rejected": .int(done.rejected),
                    "last_rejection": done.lastRejection.map(JSONValue.string) ?? .null,
                    "refused_by_peer": .int(done.refusedByPeer),
                    "last_refused_by_peer": done.lastRefusedByPeer.map(JSONValue.string) ?? .null,
                ]
                self?.emit("sync.finished", result)
                once.reply(.success(result))
            case .failure(let failure):
                self?.emit("sync.failed", ["node_id": .string(nodeID), "code": .string(failure.code), "message": .string(failure.message)])
                let code: AdminErrorCode = failure.code == "unavailable" ? .unavailable : .failed
                once.reply(.failure(AdminFailure(code, failure.message)))
            }
        }
    }

    /// `events`: replies with the sequence to expect, then streams every event after `since`
    /// (the ones still held first). `missed` counts events dropped from the ring before they
    /// could be sent.
    private func subscribe(_ request: AdminRequest, client: AdminClient, _ reply: @escaping AdminReply) throws(AdminFailure) {
        dispatchPrecondition(condition: .onQueue(queue))
        let since = UInt64(try request.optionalInt("since", in: 0...Int64.max) ?? Int64(events.lastSequence))
        let (backlog, missed) = events.events(after: since)
        client.staysOpenAfterInput()
        reply(.success(["last_seq": .int(Int64(events.lastSequence)), "missed": .int(Int64(missed))]))
        for event in backlog { client.sendLine(.object(["event": event.json])) }
        let key = ObjectIdentifier(client)
        eventSubscribers[key] = client
        client.onClose { [weak self] in
            guard let self else { return }
            self.queue.async { self.eventSubscribers[key] = nil }
        }
    }
}

/// Passes on only the first of several replies (a `sync` without `wait` answers "started", and
/// its completion must not answer again).
final class ReplyOnce: @unchecked Sendable {
    private let lock = NSLock()
    private var pending: AdminReply?

    init(_ reply: @escaping AdminReply) { pending = reply }

    func reply(_ result: Result<[String: JSONValue], AdminFailure>) {
        let reply: AdminReply? = lock.withLock {
            defer { pending = nil }
            return pending
        }
        reply?(result)
    }
}
