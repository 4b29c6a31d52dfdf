import CanopyCore
import CanopyWire
import Logging

/// Opens connections that speak protocol version 2 to one peer (the agent dials TCP and runs the
/// handshake). The completion runs on the link's serial context.
package protocol ConnectionDialer: AnyObject, Sendable {
    /// Opens a connection; calls `completion` exactly once.
    func dial(_ completion: @escaping @Sendable (Result<any ConnectionTransport, ReplicationError>) -> Void)
}

/// Everything this node replicates with one peer over one connection (`Protocol/replication-v2.md`):
/// the connection and its `ChannelMux`, and a `PeerReplicator` per database the two share, each
/// running its sessions over a channel of the mux.
///
/// A replicator's "dial" is a request for a channel (`channelDialer(for:)`): the link opens one on
/// the connection it holds, dialling the peer first when it has none and may (`dialer`), or fails
/// the request when it may not (the replicator retries with its backoff, and is told to try at
/// once when the peer connects). The peer's request for a channel goes to the replicator of that
/// database, or is refused with what `refusal` says (the database is not shared with it).
///
/// All methods run on the scheduler's serial context.
package final class PeerLink: @unchecked Sendable {
    /// The peer's name (its node id in the agent).
    package let peerName: String
    private let connectionID: [UInt8]
    private let dialer: (any ConnectionDialer)?
    private let scheduler: any ReplicationScheduler
    private let heartbeatIntervalSeconds: Double
    private let logger: Logger
    private let refusal: @Sendable (DatabaseName) -> (code: ErrorCode, message: String)
    private let onConnection: @Sendable (Bool, TransportCloseReason?) -> Void
    private var mux: ChannelMux?
    private var dialing = false
    private var stopped = false
    /// Channel requests waiting for a connection.
    private var waiting: [(DatabaseName, @Sendable (Result<any MessageTransport, ReplicationError>) -> Void)] = []
    private var replicators: [DatabaseName: PeerReplicator] = [:]

    /// A link to `peerName`. `connectionID` (16 bytes) is this node's id on the wire (its
    /// connection hello); `dialer` is nil when this node never dials the peer. `refusal` answers
    /// the peer's request for a database this link does not replicate; `onConnection` hears when
    /// a connection becomes ready (true) and when it ends (false, with why).
    package init(
        peerName: String, connectionID: [UInt8], dialer: (any ConnectionDialer)?, scheduler: any ReplicationScheduler,
        heartbeatIntervalSeconds: Double = 10, logger: Logger,
        refusal: @escaping @Sendable (DatabaseName) -> (code: ErrorCode, message: String),
        onConnection: @escaping @Sendable (Bool, TransportCloseReason?) -> Void = { _, _ in }
    ) {
        self.peerName = peerName
        self.connectionID = connectionID
        self.dialer = dialer
        self.scheduler = scheduler
        self.heartbeatIntervalSeconds = heartbeatIntervalSeconds
        self.logger = logger
        self.refusal = refusal
        self.onConnection = onConnection
    }

    /// True while a connection is open.
    package var isConnected: Bool { mux.map { !$0.isClosed } ?? false }

    /// What a replicator for `database` dials: a channel of this link.
    package func channelDialer(for database: DatabaseName) -> any PeerDialer {
        ChannelDialer(link: self, database: database)
    }

    /// Replicates `database` with `replicator` (built with `channelDialer(for:)`), which the
    /// caller starts. A connection already open is asked for its channel at once.
    package func add(_ replicator: PeerReplicator, for database: DatabaseName) {
        scheduler.assertOnContext()
        replicators[database] = replicator
    }

    /// Stops replicating `database` over this link (the caller stops the replicator, which
    /// detaches its channel).
    package func remove(_ database: DatabaseName) {
        scheduler.assertOnContext()
        replicators[database] = nil
    }

    /// Takes a connection to the peer (dialled by this node as `.initiator`, or accepted as
    /// `.responder`), replacing the one open: its channels close, and their replicators open
    /// them again on this one.
    package func adopt(_ connection: any ConnectionTransport, role: MultiplexStateMachine.Role) {
        scheduler.assertOnContext()
        guard !stopped else { return connection.close(.localClosed) }
        let previous = mux
        let created = WeakMux()
        let mux = ChannelMux(
            connection: connection, role: role, nodeID: connectionID, scheduler: scheduler,
            heartbeatIntervalSeconds: heartbeatIntervalSeconds, logger: logger,
            onAttach: { [weak self] database in self?.answer(database) ?? .refuse(code: .goingAway, message: "stopping") },
            onClosed: { [weak self] reason in self?.closed(reason, created.mux) })
        created.mux = mux
        self.mux = mux
        // Its sessions did not choose to end: they come back on this connection, and a sync
        // waiting on one of them waits on.
        previous?.close(code: .normal, reason: "replaced by a newer connection", channels: .peerClosed)
        mux.start()
        onConnection(true, nil)
        let requests = waiting
        waiting = []
        for (database, completion) in requests { open(database, completion) }
        for database in replicators.keys.sorted() { replicators[database]?.connectNow() }
    }

    /// Closes the connection; requests for channels fail from now on.
    package func stop() {
        scheduler.assertOnContext()
        stopped = true
        failWaiting(.disconnected("replication stopped"))
        mux?.close(code: .goingAway, reason: "replication stopped")
        mux = nil
    }

    /// A replicator asks for a channel for `database`.
    fileprivate func open(_ database: DatabaseName, _ completion: @escaping @Sendable (Result<any MessageTransport, ReplicationError>) -> Void) {
        scheduler.assertOnContext()
        guard !stopped else { return completion(.failure(.disconnected("replication stopped"))) }
        if let mux, !mux.isClosed {
            return mux.open(database) { result in
                switch result {
                case .opened(let channel): completion(.success(channel))
                case .refused(let code, let message) where code == .forbidden || code == .notFound:
                    completion(.failure(.notShared("\(code): \(message)")))
                case .refused(let code, let message): completion(.failure(.peerRejected("\(code): \(message)")))
                case .connectionEnded(let why): completion(.failure(.disconnected(why)))
                }
            }
        }
        guard let dialer else {
            return completion(.failure(.disconnected("waiting for the peer to connect (this node does not dial it)")))
        }
        waiting.append((database, completion))
        guard !dialing else { return }
        dialing = true
        dialer.dial { [weak self] result in
            guard let self else {
                if case .success(let connection) = result { connection.close(.localClosed) }  // nobody replicates over it
                return
            }
            self.dialing = false
            switch result {
            case .success(let connection): self.adopt(connection, role: .initiator)
            case .failure(let error): self.failWaiting(error)
            }
        }
    }

    private func failWaiting(_ error: ReplicationError) {
        let requests = waiting
        waiting = []
        for (_, completion) in requests { completion(.failure(error)) }
    }

    /// The peer asks for a channel for `database`.
    private func answer(_ database: DatabaseName) -> ChannelMux.AttachAnswer {
        guard let replicator = replicators[database] else {
            let (code, message) = refusal(database)
            return .refuse(code: code, message: message)
        }
        return .accept { channel in replicator.accept(channel) }
    }

    /// A connection ended (the one open, or one already replaced).
    private func closed(_ reason: TransportCloseReason, _ ended: ChannelMux?) {
        guard let ended, ended === mux else { return }
        mux = nil
        onConnection(false, reason)
    }
}

/// The mux a link made, for its close callback to say which connection ended.
private final class WeakMux: @unchecked Sendable {
    weak var mux: ChannelMux?
}

/// A replicator's dialer that asks its link for a channel.
private final class ChannelDialer: PeerDialer, @unchecked Sendable {
    private weak var link: PeerLink?
    private let database: DatabaseName

    init(link: PeerLink, database: DatabaseName) {
        self.link = link
        self.database = database
    }

    func dial(_ completion: @escaping @Sendable (Result<any MessageTransport, ReplicationError>) -> Void) {
        guard let link else { return completion(.failure(.disconnected("replication stopped"))) }
        link.open(database, completion)
    }
}
