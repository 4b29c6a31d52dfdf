import CanopyCore
import CanopyCrypto
import CanopyReplication
import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What the connection manager reports to the agent.
protocol PeerEventSink: AnyObject, Sendable {
    /// A peer completed the handshake but is not allowed: it is listed as pending.
    func peerRefused(nodeID: String, address: String)
    /// An allowed peer connected to us and authenticated.
    func peerConnected(nodeID: String, transport: ChannelTransport)
}

/// The TCP side of peers: listens, runs the handshake on every inbound connection (refusing
/// unknown node ids after it, as `Protocol/design.md` §5.2 says), and makes outbound connections for the
/// replication engine's dialers. Connections become `ChannelTransport`s delivering on
/// `deliveryQueue`, the replication engine's serial context.
///
/// Invariants (on `queue`): the allow-list is the configured peers; inbound connections still
/// handshaking are at most `AgentLimits.pendingInboundConnectionsMax`, shared between sources by
/// `HandshakeSlots`; each connection's own work runs on its own serial queue. The sink is given
/// to `start`, with the listener: the replication engine, which dials through this manager, is
/// built after it, and what takes accepted peers needs that engine.
final class PeerConnectionManager: @unchecked Sendable {
    let queue = DispatchQueue(label: "canopy.peers")
    /// Bytes on every peer connection, for `stats`.
    let traffic = TrafficCounters()
    private let identity: Identity
    /// The key every handshake of this agent proves (`network-key`).
    private let networkKey: NetworkKey
    private let deliveryQueue: DispatchQueue
    /// Lines about inbound connections, which anyone who can reach the port can cause.
    private let connectionLog: RateLimitedLog
    /// Where inbound peers are reported; set by `start`.
    private weak var events: (any PeerEventSink)?
    private var listener: Int32 = -1
    private var acceptSource: (any DispatchSourceRead)?
    private var allowed = AllowList([])
    /// Inbound handshakes in progress, by source (fair shares of the slots).
    private var slots = HandshakeSlots(
        totalMax: AgentLimits.pendingInboundConnectionsMax, perSourceMax: AgentLimits.pendingInboundPerSourceMax)
    /// Their drivers, by token, so an evicted one can be abandoned.
    private var inboundDrivers: [Int: HandshakeDriver] = [:]
    private var nextToken = 0
    private var stopped = false

    /// `networkKey`: the 32 bytes of `network-key`, nil for the open key. Any other length is a
    /// programming error (`ConfigParser` refuses it), never quietly the open key.
    init(identity: Identity, networkKey: [UInt8]? = nil, deliveryQueue: DispatchQueue, logger: Logger) {
        if let networkKey {
            guard let key = NetworkKey(bytes: networkKey) else { preconditionFailure("a network key of \(networkKey.count) bytes, not 32") }
            self.networkKey = key
        } else {
            self.networkKey = .open
        }
        self.identity = identity
        self.deliveryQueue = deliveryQueue
        self.connectionLog = RateLimitedLog(logger: logger)
    }

    /// Binds the listener and starts accepting, reporting inbound peers to `events` (held weakly:
    /// its owner keeps it); returns the bound port.
    func start(listen: HostPort, events: any PeerEventSink) throws(AgentError) -> UInt16 {
        let (fd, port) = try Socket.listenTCP(listen)
        queue.sync {
            self.events = events
            listener = fd
            let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
            source.setEventHandler { [weak self] in self?.acceptReady() }
            source.setCancelHandler { close(fd) }
            acceptSource = source
            source.resume()
        }
        return port
    }

    /// Replaces the allow-list (config load, reload, `peer add/remove`).
    func allow(_ peers: [PeerConfig]) {
        let ids = peers.compactMap { AgentIdentity.nodeID($0.nodeID) }
        queue.async { [self] in allowed = AllowList(ids) }
    }

    /// Stops listening. Established transports belong to the replication engine.
    func stop() {
        queue.sync {
            stopped = true
            acceptSource?.cancel()
            acceptSource = nil
        }
        connectionLog.reportSuppressed()
    }

    /// Dials `address`, runs the handshake as initiator and checks that the peer is `expected`.
    /// `completion` runs on `deliveryQueue`.
    func dial(
        _ address: HostPort, expected: NodeID,
        completion: @escaping @Sendable (Result<ChannelTransport, ReplicationError>) -> Void
    ) {
        let connectionQueue = DispatchQueue(label: "canopy.peer.connection")
        let deliveryQueue = self.deliveryQueue
        let traffic = self.traffic
        let reply: @Sendable (Result<ChannelTransport, ReplicationError>) -> Void = { result in
            deliveryQueue.async { completion(result) }
        }
        let configuration = handshakeConfiguration(address: address.description, allowed: AllowList([expected]))
        TCPConnector.connect(to: address, queue: connectionQueue) { result in
            switch result {
            case .failure(let error):
                reply(.failure(.disconnected("\(error)")))
            case .success(let fd):
                Socket.setNoDelay(fd)
                let connection = StreamConnection(fd: fd, queue: connectionQueue, pendingWriteBytesMax: AgentLimits.peerPendingWriteBytesMax, traffic: traffic)
                let driver = HandshakeDriver(
                    connection: connection, initiator: true, configuration: configuration, deliveryQueue: deliveryQueue
                ) { outcome in
                    switch outcome {
                    case .success(let transport): reply(.success(transport))
                    case .failure(let error): reply(.failure(.disconnected("handshake with \(address) failed: \(Self.describe(error))")))
                    }
                }
                driver.start()
            }
        }
    }

    /// A dialled handshake's failure, for the peer table. A listener answers nothing to a
    /// first message that does not prove its network key (replication-v1.md §4.4), so a peer that
    /// closes before its reply most likely has another key.
    static func describe(_ error: CryptoError) -> String {
        guard error == .handshakeTruncated else { return "\(error)" }
        return "handshakeTruncated: the peer closed the connection without answering "
            + "(it has another network key, or is not a Canopy agent, or is too busy)"
    }

    private func handshakeConfiguration(address: String, allowed: AllowList) -> HandshakeConfiguration {
        HandshakeConfiguration(identity: identity, authorizer: allowed, pendingPeers: nil, remoteAddress: address, networkKey: networkKey)
    }

    private func acceptReady() {
        dispatchPrecondition(condition: .onQueue(queue))
        // At most a few connections per wake-up: the listener's source fires again while more
        // wait, and a flood of connections reopened as fast as they are closed cannot keep the
        // queue from finishing the handshakes already done (an allowed peer's among them).
        for _ in 0..<AgentLimits.acceptsPerWakeMax {
            guard let fd = Socket.accept(listener) else { return }
            let address = Socket.remoteAddress(fd)
            let token = nextToken
            nextToken += 1
            guard !stopped, case .admit(let evicting) = slots.admit(token, from: HandshakeSlots.source(of: address)) else {
                connectionLog.log(.warning, kind: "peer.refused.busy", "refusing connection from \(address): too many handshakes in progress")
                close(fd)
                continue
            }
            if let evicting, let driver = inboundDrivers.removeValue(forKey: evicting) {
                connectionLog.log(.info, kind: "peer.handshake.evicted", "a handshake from a source holding many slots gave its place to \(address)")
                driver.abandon()
            }
            let connectionQueue = DispatchQueue(label: "canopy.peer.connection")
            Socket.setNoDelay(fd)
            let connection = StreamConnection(fd: fd, queue: connectionQueue, pendingWriteBytesMax: AgentLimits.peerPendingWriteBytesMax, traffic: traffic)
            let driver = HandshakeDriver(
                connection: connection, initiator: false, configuration: handshakeConfiguration(address: address, allowed: allowed),
                deliveryQueue: deliveryQueue
            ) { [weak self] outcome in
                guard let self else { return }
                self.queue.async { self.inboundFinished(outcome, address: address, token: token) }
            }
            inboundDrivers[token] = driver
            connectionQueue.async { driver.start() }
        }
    }

    private func inboundFinished(_ outcome: Result<ChannelTransport, CryptoError>, address: String, token: Int) {
        dispatchPrecondition(condition: .onQueue(queue))
        slots.finished(token)
        inboundDrivers[token] = nil
        switch outcome {
        case .success(let transport):
            events?.peerConnected(nodeID: transport.peer.description, transport: transport)
        case .failure(.peerNotAuthorized(let peer)):
            // One kind for every unknown node id: generating ids is cheap, so a flood of them must
            // not get a line each (each is listed as pending all the same).
            connectionLog.log(.notice, kind: "peer.refused.unknown", "refused \(peer) from \(address): not an allowed peer (listed as pending)")
            events?.peerRefused(nodeID: peer.description, address: address)
        case .failure(let error):
            connectionLog.log(.info, kind: "peer.handshake.failed", "inbound connection from \(address) failed: \(error)")
        }
    }
}

/// The replication engine's dialer for one peer: TCP connect plus handshake, each call one attempt
/// (the engine retries with backoff).
final class TCPPeerDialer: ConnectionDialer, @unchecked Sendable {
    private let manager: PeerConnectionManager
    private let address: HostPort
    private let nodeID: NodeID
    private let adopt: @Sendable (ChannelTransport) -> Bool

    /// `adopt` runs on the engine's queue when a connection is ready; false means the engine
    /// keeps the connection it has (simultaneous connect) and closed this one, so the dial
    /// reports none.
    init(manager: PeerConnectionManager, address: HostPort, nodeID: NodeID, adopt: @escaping @Sendable (ChannelTransport) -> Bool) {
        self.manager = manager
        self.address = address
        self.nodeID = nodeID
        self.adopt = adopt
    }

    func dial(_ completion: @escaping @Sendable (Result<any ConnectionTransport, ReplicationError>) -> Void) {
        let adopt = self.adopt
        manager.dial(address, expected: nodeID) { result in
            switch result {
            case .success(let transport):
                if adopt(transport) {
                    completion(.success(transport))
                } else {
                    completion(.failure(.disconnected("simultaneous connect: the connection already open is kept")))
                }
            case .failure(let error):
                completion(.failure(error))
            }
        }
    }
}
