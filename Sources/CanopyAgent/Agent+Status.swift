import CanopyAdmin
import CanopyCore
import CanopyReplication
import CanopyStore
import Dispatch

/// `status` and `peers`: the agent's own state (read on `queue`), each configured peer's
/// replication status (from the controller), and the store's counts (on `operatorQueue`, not
/// behind document commands).
extension Agent {
    func status(_ reply: @escaping TypedAdminRoute<Admin.Status>.Reply) {
        dispatchPrecondition(condition: .onQueue(queue))
        let listen = listening?.address.description ?? config.listen.description
        let network = config.networkKey == nil ? "open" : "private"
        let adminSocket = listening?.admin.path ?? ""
        let conflicts = config.conflicts.description
        let rules = config.rules.map(Self.ruleRow)
        let resolverRows = resolvers.statusRows
        let uptime = (Self.wallClock() - startedAt).rounded()
        let damaged = Int64(damageFound.count)
        let lastDamage = lastDamage
        let waiting = resolvers.waitingDocuments(in: .default)
        peerRows { rows in
            self.operatorQueue.async {
                reply(self.storeResult {
                    let counts = try self.storeCounts(of: self.store)
                    let awaiting = try Self.conflictsAwaitingResolver(in: self.store, waiting: waiting)
                    return Admin.Status.Reply(
                        nodeID: self.identity.nodeID, listen: listen, network: network, adminSocket: adminSocket,
                        dataDir: self.options.directory.path, conflicts: conflicts, rules: rules, resolvers: resolverRows,
                        uptimeSeconds: uptime, damaged: damaged, lastDamage: lastDamage, counts: counts,
                        conflictsAwaitingResolver: awaiting, conflictsKept: counts.conflictedCount - awaiting, peers: rows)
                })
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
    static func ruleRow(_ rule: ResolutionRule) -> Admin.Rule {
        Admin.Rule(
            name: rule.name, prefix: rule.idPrefix, field: rule.fieldValue == nil ? nil : rule.field, value: rule.fieldValue,
            strategy: rule.strategy.description)
    }

    func peerList(_ reply: @escaping TypedAdminRoute<Admin.Peers>.Reply) {
        dispatchPrecondition(condition: .onQueue(queue))
        let pending = inbound.pending.rows
        peerRows { rows in reply(.success(Admin.Peers.Reply(peers: rows, pending: pending))) }
    }

    /// One row per configured peer (file order), merged with the replication status and the
    /// connection state. Calls `completion` on `queue`.
    func peerRows(_ completion: @escaping @Sendable ([Admin.PeerStatus]) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        let configured = config.peers
        // The direction `default` replicates in: the peer's, unless a share section says otherwise.
        let sharing = config.sharing
        let directions = configured.map { sharing.share(of: .default, with: $0.nodeID)?.access.direction?.rawValue ?? "none" }
        replication.statuses { statuses in
            self.queue.async {
                completion(zip(configured, directions).map { peer, direction in
                    var row = statuses.first { $0.nodeID == peer.nodeID }
                        ?? Admin.PeerStatus(nodeID: peer.nodeID, address: nil, direction: direction, mode: peer.mode, connected: false, state: .stopped)
                    row.address = peer.address?.description
                    row.direction = direction
                    row.mode = peer.mode
                    return row
                })
            }
        }
    }
}
