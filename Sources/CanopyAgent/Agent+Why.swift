import CanopyAdmin
import CanopyCore
import CanopyReplication
import CanopyStore
import Foundation

/// `why`: whether each peer holds this node's current revision of a document, and if not, why
/// not, from what the node knows without asking the peer — the shares, the peer's
/// acknowledgements of this node's changes, what it subscribed for, what it refused, its
/// connection, and the document's own state here (content still arriving, a conflict waiting
/// for a resolver).
extension Agent {
    /// The document as this node holds it, read on `storeQueue`.
    private struct LocalView {
        var name: DatabaseName
        var revision: RevisionID?
        var deleted: Bool
        var sequence: Int64?
        var awaitingContent: Int64
    }

    /// Runs on `queue` (config and resolvers), reads the document on `storeQueue`, then asks
    /// the engine what each peer acknowledged.
    func why(_ command: Admin.Why, _ reply: @escaping TypedAdminRoute<Admin.Why>.Reply) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        let sharing = config.sharing
        let configured = config.peers.map(\.nodeID)
        let peerIDs: [String]
        if let wanted = command.peer {
            let canonical = AgentIdentity.nodeID(wanted)?.description ?? wanted
            guard configured.contains(canonical) else {
                throw AdminFailure(.notFound, "\(wanted.prefix(80)) is not a configured peer; `canopyctl peers` lists them")
            }
            peerIDs = [canonical]
        } else {
            peerIDs = configured
        }
        let waiting = resolvers.waitingResolvers
        storeQueue.async { [self] in
            let local: LocalView
            do {
                local = try localView(command)
            } catch let failure as AdminFailure {
                return reply(.failure(failure))
            } catch let error as StoreError {
                return reply(.failure(Self.failure(for: error)))
            } catch {
                return reply(.failure(AdminFailure(.failed, "\(error)")))
            }
            let resolver = waiting[ResolverOffers.Key(local.name, command.doc)]
            replication.delivery(of: command.doc, in: local.name) { deliveries in
                let rows = peerIDs.map { id in
                    Self.whyRow(id, command.doc, local, share: sharing.share(of: local.name, with: id),
                                delivery: deliveries.first { $0.nodeID == id }, resolver: resolver)
                }
                reply(.success(Admin.Why.Reply(
                    db: local.name.text, doc: command.doc, rev: local.revision, deleted: local.deleted, awaitingContent: local.awaitingContent,
                    awaitingResolver: resolver, peers: rows)))
            }
        }
    }

    private func localView(_ command: Admin.Why) throws -> LocalView {
        let database = try database(named: command.db)
        let store = database.store
        let awaiting = Int64(try store.setAsideRevisions(of: command.doc).count)
        do {
            let document = try store.get(id: command.doc)
            return LocalView(
                name: database.name, revision: document.revision, deleted: document.isDeleted, sequence: try store.sequence(of: command.doc),
                awaitingContent: awaiting)
        } catch .notFound {
            guard awaiting > 0 else {
                throw AdminFailure(.notFound, "document \"\(command.doc.prefix(80))\" is not in \(database.name) on this node: nothing to send; "
                    + "run `canopyctl why` on the node that wrote it")
            }
            return LocalView(name: database.name, revision: nil, deleted: false, sequence: nil, awaitingContent: awaiting)
        }
    }

    /// One peer's answer, the first reason that applies in the order of `Admin.WhyReason`.
    private static func whyRow(
        _ id: String, _ documentID: String, _ local: LocalView, share: Share?, delivery: PeerDelivery?, resolver: String?
    ) -> Admin.WhyRow {
        func row(_ reason: Admin.WhyReason, _ detail: String, since: Double? = nil) -> Admin.WhyRow {
            Admin.WhyRow(nodeID: id, holds: reason == .holds, reason: reason, detail: detail, since: since,
                         resolver: reason == .awaitingResolver ? resolver : nil)
        }
        let db = local.name
        guard let share else {
            return row(.notShared, "\(db) is not shared with this peer (`canopyctl share \(db) \(id) --access read-write` shares it)")
        }
        if let prefix = share.prefix, !share.covers(documentID) {
            return row(.outsidePrefix, "\(db) is shared with this peer only for ids starting \(prefix)")
        }
        guard share.access.peerReads else {
            return row(.notSent, "this node lets the peer write \(db) only (access \(share.access.rawValue)): it sends it nothing")
        }
        guard let revision = local.revision, let sequence = local.sequence else {
            return row(.awaitingContent, "this node does not hold the document yet: \(local.awaitingContent) revision"
                + (local.awaitingContent == 1 ? " from a peer waits for its" : "s from peers wait for their") + " attachment content")
        }
        guard let delivery, delivery.replicating else {
            return row(.notShared, "no replication of \(db) runs with this peer (its share gives no direction this node replicates in)")
        }
        if let refusal = delivery.refusal, refusal.revision == nil || refusal.revision == revision {
            return row(.refusedByPeer, "the peer refused \(refusal.revision.map { "\($0)" } ?? "it"): \(refusal.reason)")
        }
        // What the peer subscribed for comes before its acknowledgements: those cover only the
        // documents its subscription asks for.
        switch delivery.intake {
        case .nothing?:
            return row(.peerDoesNotTake, "the peer does not take this node's writes of \(db): it subscribes for nothing (its share lets this node read only)")
        case .prefix(let prefix)? where !documentID.hasPrefix(prefix):
            return row(.peerDoesNotTake, "the peer takes only ids starting \(prefix) of \(db) from this node")
        default:
            break
        }
        if let acknowledged = delivery.acknowledged, UInt64(clamping: sequence) <= acknowledged {
            return row(.holds, "the peer acknowledged this node's changes up to sequence \(acknowledged); this revision is sequence \(sequence)")
        }
        guard delivery.connected else {
            let since = delivery.disconnectedAt
            return row(.offline, since.map { "the peer is offline since \(Self.timestamp($0))" } ?? "the peer has not been connected since the agent started",
                       since: since)
        }
        if let resolver {
            return row(.awaitingResolver, "the document's conflict here waits for resolver \(resolver): its outcome is what the peer will be sent")
        }
        let acknowledged = delivery.acknowledged.map { "up to sequence \($0)" } ?? "nothing yet"
        return row(.queued, "connected; the peer acknowledged \(acknowledged) and this revision is sequence \(sequence): it is on its way")
    }

    /// `2026-12-06T21:36:25Z`.
    static func timestamp(_ seconds: Double) -> String {
        ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: seconds))
    }
}
