import CanopyAdmin
import CanopyAgent
import CanopyCore
import CanopyReplication
import Dispatch

/// The agent's peers, syncing with one (`peers`, `sync`), and its event stream (`events`).
extension NodeClient {
    /// A configured peer as the agent's `peers` and `status` commands list it: its address,
    /// which way `default` replicates, whether a session is open, the replication's state and
    /// what it has confirmed, refusals, and a row per database replicated with it (the
    /// admin protocol's peer row, Protocol/admin-v1.md §6).
    public typealias Peer = Admin.PeerStatus

    /// One database replicated with a ``Peer`` (`Peer.databases`): its share, state and counts.
    public typealias PeerDatabase = Admin.PeerDatabaseStatus

    /// A peer's replication state as the agent reports it (`stopped`, `offline`, `connecting`,
    /// `idle`, `busy`, `error`, `unshared`): `Peer.state` and `PeerDatabase.state`.
    public typealias PeerState = ReplicatorState

    /// How far a peer's replication has come (`Peer.progress`).
    public typealias PeerProgress = Admin.Progress

    /// Whether a peer replicates continuously or once per `sync` (`Peer.mode`).
    public typealias PeerMode = ReplicationMode

    /// One line of the agent's event stream (Protocol/admin-v1.md §5).
    public struct Event: Sendable, Equatable {
        /// The event's number: 1 for the first since the agent started, then one more per event.
        public var sequence: Int64
        /// What happened: `document.changed`, `peer.connected`, `sync.finished`, `conflict.detected`, ….
        public var type: String
        /// When, in seconds since 1970.
        public var time: Double
        /// The event's members (an object), as the protocol lists them for its type.
        public var data: JSONValue

        /// Creates an event value.
        public init(sequence: Int64, type: String, time: Double, data: JSONValue) {
            self.sequence = sequence
            self.type = type
            self.time = time
            self.data = data
        }
    }

    /// The peers configured on the agent.
    public func peers() async throws(NodeClientError) -> [Peer] {
        try await call(Admin.Peers()).peers
    }

    /// Replicates once with the configured peer `peer` (every database shared with it) and
    /// returns when both directions have caught up: the `sync` command with `wait`. A lost
    /// connection to the peer is retried by the agent, so this waits until the peer is reached;
    /// cancel the task to stop waiting. Fails with code `not_found` when `peer` is not a
    /// configured peer or shares no database, `failed` when the peer breaks the protocol.
    @discardableResult
    public func sync(peer: String) async throws(NodeClientError) -> Replicator.SyncOutcome {
        // A connection of its own: a waiting `sync` holds up later requests on its connection.
        let client = try Self.connect(socketPath)
        let path = socketPath
        let result = await withTaskCancellationHandler {
            await Self.offPool(DispatchQueue.global()) { Self.send(client, Admin.Sync(nodeID: peer, wait: true), path: path) }
        } onCancel: {
            client.disconnect()
        }
        guard case .finished(let done) = try result.get() else {
            throw .unexpectedResponse("sync: the agent answered before the sync finished")
        }
        return Replicator.SyncOutcome(
            completed: UInt64(max(0, done.completed)), rejected: done.rejected, refusedByPeer: done.refusedByPeer, received: done.received,
            sent: done.sent, notSharedByPeer: done.notSharedByPeer.map(\.db),
            peerTakesPart: Dictionary(done.peerTakesPart.map { ($0.db, $0.peerTakes) }, uniquingKeysWith: { first, _ in first }))
    }

    /// The most events an ``events(since:)`` stream holds for its reader.
    public static let eventBufferCount = 4096

    /// Subscribes to the agent's event stream; the subscription is in place when this returns,
    /// so every event after it is delivered. With `since`, the events the agent still holds
    /// after that sequence come first (pass the last ``Event/sequence`` seen to resume without
    /// missing any). The stream ends when the task iterating it is cancelled (or the stream is
    /// released) or the agent closes the connection; it throws ``NodeClientError`` when the agent
    /// sends something unreadable. At most ``eventBufferCount`` events wait to be read: one more
    /// ends the stream with ``NodeClientError/readerTooSlow(buffered:lastDelivered:)``, after
    /// the events it holds, so memory stays bounded and nothing is skipped unseen.
    public func events(since: Int64? = nil) async throws(NodeClientError) -> AsyncThrowingStream<Event, any Error> {
        let client = try Self.connect(socketPath)
        let path = socketPath
        let reader = DispatchQueue(label: "canopy.node-client.events")
        _ = try await Self.offPool(reader) { Self.send(client, Admin.Subscribe(since: since), path: path) }.get()
        let (stream, continuation) = AsyncThrowingStream.makeStream(
            of: Event.self, bufferingPolicy: .bufferingOldest(Self.eventBufferCount))
        continuation.onTermination = { _ in client.disconnect() }
        reader.async {
            var lastDelivered = since ?? 0
            while true {
                let line: [String: JSONValue]
                do throws(AdminSocketClient.ClientError) {
                    line = try client.readObject()
                } catch .closed {
                    return continuation.finish()
                } catch {
                    return continuation.finish(throwing: NodeClientError(error, path: path))
                }
                // Only event lines follow the reply; a line of another kind is skipped.
                let event: Admin.Event
                do throws(AdminFailure) {
                    guard case .event(let read) = try AdminLine.read(line) else { continue }
                    event = read
                } catch {
                    return continuation.finish(throwing: NodeClientError.unexpectedResponse(error.message))
                }
                let sequence = event.seq
                if case .dropped = continuation.yield(Event(sequence: sequence, type: event.type, time: event.time, data: event.data)) {
                    client.disconnect()
                    return continuation.finish(throwing: NodeClientError.readerTooSlow(
                        buffered: Self.eventBufferCount, lastDelivered: lastDelivered))
                }
                lastDelivered = sequence
            }
        }
        return stream
    }
}
