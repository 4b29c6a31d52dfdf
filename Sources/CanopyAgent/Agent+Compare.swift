import CanopyAdmin
import CanopyCore
import CanopyReplication
import Foundation

/// `compare`: asks a connected peer where its documents and this node's differ, over the
/// replication connection (`Protocol/digests.md` §6).
extension Agent {
    /// How long a compare waits for the peer's answers in all.
    static let compareTimeoutSeconds = 60.0

    /// Runs on `queue` (config); checks the database on `storeQueue`, then asks the engine.
    func compare(_ command: Admin.Compare, _ reply: @escaping TypedAdminRoute<Admin.Compare>.Reply) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        let canonical = AgentIdentity.nodeID(command.peer)?.description ?? command.peer
        guard config.peers.contains(where: { $0.nodeID == canonical }) else {
            throw AdminFailure(.notFound, "\(command.peer.prefix(80)) is not a configured peer; `canopyctl peers` lists them")
        }
        let limit = command.limit ?? Admin.Compare.limitDefault
        guard (1...Admin.Compare.limitMax).contains(limit) else {
            throw AdminFailure(.invalidArgument, "limit must be 1…\(Admin.Compare.limitMax), not \(limit)")
        }
        let prefix = command.prefix ?? ""
        let sharing = config.sharing
        storeQueue.async { [self] in
            let name: DatabaseName
            do throws(AdminFailure) {
                name = try database(named: command.db).name
            } catch {
                return reply(.failure(error))
            }
            guard sharing.share(of: name, with: canonical) != nil else {
                return reply(.failure(AdminFailure(
                    .notFound, "database \(name) is not shared with \(canonical): there is nothing to compare; `canopyctl share \(name) \(canonical)` shares it")))
            }
            replication.compare(
                peer: canonical, database: name, prefix: prefix, differencesMax: limit, timeoutSeconds: Self.compareTimeoutSeconds
            ) { result in
                reply(Self.compareReply(result, database: name, peer: canonical))
            }
        }
    }

    private static func compareReply(
        _ result: Result<DigestCompareOutcome, DigestCompareFailure>?, database: DatabaseName, peer: String
    ) -> Result<Admin.Compare.Reply, AdminFailure> {
        switch result {
        case nil:
            return .failure(AdminFailure(.unavailable, "no replication of \(database) runs with \(peer); `canopyctl peers` shows its state"))
        case .failure(.disconnected):
            return .failure(AdminFailure(
                .unavailable, "\(peer) is not connected for \(database): a compare asks the peer over its replication connection; "
                    + "`canopyctl peers` shows why it is down (a one-shot peer connects during `canopyctl sync` only)"))
        case .failure(.unsupported):
            return .failure(AdminFailure(.unavailable, "\(peer) runs a version of Canopy that cannot compare databases: upgrade it"))
        case .failure(.refused(let code, let message)):
            return .failure(AdminFailure(.failed, "\(peer) refused to compare \(database) (\(code)): \(message)"))
        case .failure(.timedOut(let seconds)):
            return .failure(AdminFailure(.unavailable, "\(peer) did not finish answering the compare of \(database) within \(Int(seconds)) s"))
        case .failure(.store(let detail)):
            return .failure(AdminFailure(.failed, "reading \(database) on this node failed: \(detail)"))
        case .success(let outcome):
            let rows = outcome.differences.map { difference in
                Admin.CompareRow(
                    doc: difference.id,
                    side: difference.local == nil ? .remoteOnly : difference.remote == nil ? .localOnly : .both,
                    local: (difference.local ?? []).map { Admin.CompareLeaf(rev: $0.revision, deleted: $0.deleted) },
                    remote: (difference.remote ?? []).map { Admin.CompareLeaf(rev: $0.revision, deleted: $0.deleted) })
            }
            return .success(Admin.Compare.Reply(
                db: database.text, peer: peer, identical: rows.isEmpty && !outcome.truncated, prefix: outcome.prefix, differences: rows,
                truncated: outcome.truncated, nodes: outcome.nodesCompared, roundTrips: outcome.roundTrips))
        }
    }
}
