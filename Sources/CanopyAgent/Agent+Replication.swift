import CanopyCore
import CanopyReplication
import Dispatch
import Foundation

/// Replication wiring: what the engine reports goes to the event hub, which is its
/// `ReplicationEventSink` (the agent builds the hub first, then the connection manager, then the
/// controller with the hub as its sink: see `Agent.init`).
extension EventHub: ReplicationEventSink {
    func emit(type: String, data: [String: JSONValue]) { emit(type, data) }
}

/// What the agent asks of replication beyond its config (`applyConfig` hands that over):
/// one-shot syncs.
extension Agent {
    /// `sync`: a one-shot replication with a peer. With `wait`, the reply comes when it is done
    /// and progress goes out as `sync.progress` events; without, the reply is immediate.
    func sync(_ request: AdminRequest, _ reply: @escaping AdminReply) throws(AdminFailure) {
        dispatchPrecondition(condition: .onQueue(queue))
        let rawID = try request.string("node_id")
        guard let nodeID = AgentIdentity.normalizeNodeID(rawID), config.peer(nodeID) != nil else {
            throw AdminFailure(.notFound, "\"\(rawID.prefix(80))\" is not a configured peer")
        }
        let wait = try request.bool("wait")
        let once = ReplyOnce(reply)
        // Without `wait` the reply says it started, before the sync can finish and answer first.
        if !wait { once.reply(.success(["node_id": .string(nodeID), "started": .bool(true)])) }
        let progress: @Sendable (ReplicationProgress) -> Void = { [weak events] progress in
            events?.emit("sync.progress", [
                "node_id": .string(nodeID), "completed": .int(Int64(progress.completed)), "total": .int(Int64(progress.total)),
            ])
        }
        replication.sync(peer: nodeID, progress: progress) { [weak events] result in
            switch result {
            case .success(let done):
                let result: [String: JSONValue] = [
                    "node_id": .string(nodeID), "completed": .int(Int64(done.completed)), "rejected": .int(done.rejected),
                    "last_rejection": done.lastRejection.map(JSONValue.string) ?? .null,
                    "refused_by_peer": .int(done.refusedByPeer),
                    "last_refused_by_peer": done.lastRefusedByPeer.map(JSONValue.string) ?? .null,
                ]
                events?.emit("sync.finished", result)
                once.reply(.success(result))
            case .failure(let failure):
                events?.emit("sync.failed", ["node_id": .string(nodeID), "code": .string(failure.code), "message": .string(failure.message)])
                let code: AdminErrorCode = failure.code == "unavailable" ? .unavailable : .failed
                once.reply(.failure(AdminFailure(code, failure.message)))
            }
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
