import CanopyCore
import CanopyReplication
import CanopyStore
import Dispatch

/// `status` and `peers`: the agent's own state (read on `queue`), each configured peer's
/// replication status (from the controller), and the store's counts (on `operatorQueue`, not
/// behind document commands).
extension Agent {
    func status(_ reply: @escaping AdminReply) {
        dispatchPrecondition(condition: .onQueue(queue))
        let base: [String: JSONValue] = [
            "node_id": .string(identity.nodeID),
            "listen": .string(listening?.address.description ?? config.listen.description),
            "network": .string(config.networkKey == nil ? "open" : "private"),
            "admin_socket": .string(listening?.admin.path ?? ""),
            "data_dir": .string(options.directory.path),
            "conflicts": .string(config.conflicts.description),
            "rules": .array(config.rules.map(Self.ruleRow)),
            "resolvers": .array(resolvers.statusRows),
            "uptime_seconds": .double((Self.wallClock() - startedAt).rounded()),
        ].merging(damageStatus) { first, _ in first }
        let waiting = resolvers.waitingDocuments(in: .default)
        peerRows { rows in
            self.operatorQueue.async {
                do throws(StoreError) {
                    var result = try self.storeCounts(of: self.store).merging(base) { store, _ in store }
                    let awaiting = try Self.conflictsAwaitingResolver(in: self.store, waiting: waiting)
                    guard case .int(let conflicted)? = result["conflicted_count"] else {
                        preconditionFailure("storeCounts always has conflicted_count")
                    }
                    result["conflicts_awaiting_resolver"] = .int(awaiting)
                    result["conflicts_kept"] = .int(conflicted - awaiting)
                    result["peers"] = .array(rows)
                    reply(.success(result))
                } catch {
                    reply(.failure(Self.failure(for: error)))
                }
            }
        }
    }

    /// How many of `store`'s conflicted documents are among `waiting`, the documents the
    /// resolvers keep conflicts of for a resolver client (`status`, `db.list`). Off the agent queue.
    static func conflictsAwaitingResolver(in store: DocumentStore, waiting: Set<String>) throws(StoreError) -> Int64 {
        waiting.isEmpty ? 0 : Int64(try store.conflictedDocumentIDs().count { waiting.contains($0) })
    }

    /// A `[rule NAME]` section as `status` lists it: what it matches (null for what it does not
    /// look at) and its strategy, as the config file spells them.
    static func ruleRow(_ rule: ResolutionRule) -> JSONValue {
        .object([
            "name": .string(rule.name),
            "prefix": rule.idPrefix.map(JSONValue.string) ?? .null,
            "field": rule.fieldValue == nil ? .null : .string(rule.field),
            "value": rule.fieldValue.map(JSONValue.string) ?? .null,
            "strategy": .string(rule.strategy.description),
        ])
    }

    func peerList(_ reply: @escaping AdminReply) {
        dispatchPrecondition(condition: .onQueue(queue))
        let pending = inbound.pending.rows
        peerRows { rows in reply(.success(["peers": .array(rows), "pending": .array(pending)])) }
    }

    /// One row per configured peer (file order), merged with the replication status and the
    /// connection state. Calls `completion` on `queue`.
    private func peerRows(_ completion: @escaping @Sendable ([JSONValue]) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        let configured = config.peers
        // The direction `default` replicates in: the peer's, unless a share section says otherwise.
        let directions = configured.map { config.share(of: .default, with: $0.nodeID)?.access.direction?.rawValue ?? "none" }
        replication.statuses { statuses in
            self.queue.async {
                completion(zip(configured, directions).map { peer, direction in
                    let status = statuses.first { $0.nodeID == peer.nodeID }
                    return Self.peerRow(peer, direction: direction, status: status, connected: status?.connected == true)
                })
            }
        }
    }

    static func peerRow(_ peer: PeerConfig, direction: String, status: PeerReplicationStatus?, connected: Bool) -> JSONValue {
        let optional: (Int64?) -> JSONValue = { $0.map(JSONValue.int) ?? .null }
        return .object([
            "node_id": .string(peer.nodeID),
            "address": peer.address.map { .string($0.description) } ?? .null,
            "direction": .string(direction),
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
            "protocol_violations": .int(status?.protocolViolations ?? 0),
            "last_protocol_violation": status?.lastProtocolViolation.map(JSONValue.string) ?? .null,
            "databases": .array((status?.databases ?? []).map(databaseRow)),
        ])
    }

    /// One database's replication with a peer, under the peer's row.
    static func databaseRow(_ row: PeerDatabaseStatus) -> JSONValue {
        let optional: (Int64?) -> JSONValue = { $0.map(JSONValue.int) ?? .null }
        return .object([
            "db": .string(row.database.text), "access": .string(row.access.rawValue), "prefix": row.prefix.map(JSONValue.string) ?? .null,
            "state": .string(row.state.rawValue), "last_pushed_seq": optional(row.lastPushedSequence),
            "last_pulled_seq": optional(row.lastPulledSequence), "rejected": .int(row.rejected),
            "last_rejection": row.lastRejection.map(JSONValue.string) ?? .null, "refused_by_peer": .int(row.refusedByPeer),
            "last_refused_by_peer": row.lastRefusedByPeer.map(JSONValue.string) ?? .null,
            "last_error": row.lastError.map(JSONValue.string) ?? .null,
            "peer_takes": row.peerIntake.map { .string($0.summary) } ?? .null,
        ])
    }
}
