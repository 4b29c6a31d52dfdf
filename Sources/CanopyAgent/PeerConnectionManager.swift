import CanopyCore
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
    /// An authenticated transport to an allowed peer is ready.
    func peerConnected(nodeID: String, transport: any PeerTransport)
    /// Anything else worth an admin event.
    func emit(type: String, data: [String: JSONValue])
}

/// Runs the handshake over a fresh TCP connection and produces an encrypted transport.
/// CanopyCrypto's handshake and secure channel implement it; the manager only moves bytes.
protocol SecureSessionFactory: Sendable {
    /// Takes over `connection` (already started reading is NOT assumed: the factory starts it)
    /// and calls `completion` once on the connection's queue.
    /// `expectedPeer` is the node id dialled (nil for inbound connections).
    func establish(
        over connection: StreamConnection, expectedPeer: String?, isAllowed: @escaping @Sendable (String) -> Bool,
        completion: @escaping (Result<any PeerTransport, SessionFailure>) -> Void)
}

/// Why a connection did not become a session.
enum SessionFailure: Error, Sendable {
    /// The peer authenticated as `nodeID`, which is not allowed.
    case notAllowed(nodeID: String)
    /// Anything else (garbage, timeout, bad signature, wrong peer): logged, connection closed.
    case failed(String)
}

/// The factory used while CanopyCrypto's channel is not wired in: every connection is refused
/// with a clear reason, so no plaintext document ever crosses the network.
struct UnavailableSecureSessions: SecureSessionFactory {
    func establish(
        over connection: StreamConnection, expectedPeer: String?, isAllowed: @escaping @Sendable (String) -> Bool,
        completion: @escaping (Result<any PeerTransport, SessionFailure>) -> Void
    ) {
        connection.close()
        completion(.failure(.failed("the encrypted channel is not available in this build")))
    }
}

/// Listens for peers, dials configured peers with exponential backoff, and hands authenticated
/// transports to the agent. One connection per peer: a peer with a live session is not dialled.
///
/// Invariants (all on `queue`): `dialers` has one entry per configured peer with an address;
/// `sessions` holds the peers with an established transport; inbound connections not yet
/// authenticated are at most `AgentLimits.pendingInboundConnectionsMax`.
final class PeerConnectionManager: @unchecked Sendable {
    let queue = DispatchQueue(label: "canopy.peers")
    private let localNodeID: String
    private let logger: Logger
    private weak var events: (any PeerEventSink)?
    private let sessions: SecureSessionFactory
    private var listener: Int32 = -1
    private var acceptSource: (any DispatchSourceRead)?
    private var allowed: Set<String> = []
    private var dialers: [String: PeerDialer] = [:]
    private var connected: Set<String> = []
    private var handshaking = 0
    private var stopped = false

    init(localNodeID: String, logger: Logger, events: any PeerEventSink, sessions: SecureSessionFactory = UnavailableSecureSessions()) {
        self.localNodeID = localNodeID
        self.logger = logger
        self.events = events
        self.sessions = sessions
    }

    /// Binds the listener and starts accepting; returns the bound port.
    func start(listen: HostPort) throws(AgentError) -> UInt16 {
        let (fd, port) = try Socket.listenTCP(listen)
        queue.sync {
            listener = fd
            let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
            source.setEventHandler { [weak self] in self?.acceptReady() }
            source.setCancelHandler { close(fd) }
            acceptSource = source
            source.resume()
        }
        return port
    }

    /// Applies the configured peer list: new dialers start, removed peers stop being dialled.
    func apply(peers: [PeerConfig]) {
        queue.async { [self] in
            guard !stopped else { return }
            allowed = Set(peers.map(\.nodeID))
            let wanted = peers.filter { $0.address != nil && $0.nodeID != localNodeID }
            for (id, dialer) in dialers where !wanted.contains(where: { $0.nodeID == id && $0.address == dialer.address }) {
                dialer.cancel()
                dialers[id] = nil
            }
            for peer in wanted where dialers[peer.nodeID] == nil {
                let dialer = PeerDialer(nodeID: peer.nodeID, address: peer.address!, queue: queue, logger: logger) { [weak self] fd in
                    self?.dialed(peer.nodeID, fd: fd)
                }
                dialers[peer.nodeID] = dialer
                if !connected.contains(peer.nodeID) { dialer.schedule(after: 0) }
            }
        }
    }

    /// Node ids with an established session.
    func connectedPeers() -> Set<String> { queue.sync { connected } }

    /// Stops listening and dialling. Established transports are closed by their owner (replication).
    func stop() {
        queue.sync {
            stopped = true
            acceptSource?.cancel()
            acceptSource = nil
            for dialer in dialers.values { dialer.cancel() }
            dialers = [:]
        }
    }

    private func acceptReady() {
        while let fd = Socket.accept(listener) {
            let address = Socket.remoteAddress(fd)
            guard handshaking < AgentLimits.pendingInboundConnectionsMax, !stopped else {
                logger.warning("refusing connection from \(address): too many handshakes in progress")
                close(fd)
                continue
            }
            authenticate(fd: fd, address: address, expectedPeer: nil)
        }
    }

    private func dialed(_ nodeID: String, fd: Int32) {
        authenticate(fd: fd, address: dialers[nodeID]?.address.description ?? "?", expectedPeer: nodeID)
    }

    private func authenticate(fd: Int32, address: String, expectedPeer: String?) {
        handshaking += 1
        let connection = StreamConnection(fd: fd, queue: queue, pendingWriteBytesMax: AgentLimits.adminPendingWriteBytesMax)
        let allowedNow = allowed
        sessions.establish(over: connection, expectedPeer: expectedPeer, isAllowed: { allowedNow.contains($0) }) { [weak self] result in
            self?.sessionResult(result, address: address, expectedPeer: expectedPeer)
        }
    }

    private func sessionResult(_ result: Result<any PeerTransport, SessionFailure>, address: String, expectedPeer: String?) {
        handshaking -= 1
        switch result {
        case .success(let transport):
            let id = transport.peerNodeID
            guard !connected.contains(id) else {
                // Simultaneous connect: the session that arrived second is closed.
                transport.close()
                return
            }
            connected.insert(id)
            dialers[id]?.succeeded()
            events?.peerConnected(nodeID: id, transport: ClosingTransport(transport) { [weak self] in
                guard let self else { return }
                self.queue.async { self.sessionClosed(id) }
            })
        case .failure(.notAllowed(let id)):
            logger.notice("refused \(id) from \(address): not an allowed peer (listed as pending)")
            events?.peerRefused(nodeID: id, address: address)
        case .failure(.failed(let reason)):
            logger.info("connection \(expectedPeer.map { "to \($0)" } ?? "from \(address)") failed: \(reason)")
            if let expectedPeer { dialers[expectedPeer]?.failed() }
        }
    }

    private func sessionClosed(_ id: String) {
        connected.remove(id)
        events?.emit(type: "peer.disconnected", data: ["node_id": .string(id)])
        dialers[id]?.failed()
    }
}

/// Wraps a transport to learn when it closes, so the manager can redial.
final class ClosingTransport: PeerTransport, @unchecked Sendable {
    private let inner: any PeerTransport
    private let onClosed: @Sendable () -> Void

    init(_ inner: any PeerTransport, onClosed: @escaping @Sendable () -> Void) {
        self.inner = inner
        self.onClosed = onClosed
    }

    var peerNodeID: String { inner.peerNodeID }

    func start(onMessage: @escaping @Sendable ([UInt8]) -> Void, onClose: @escaping @Sendable (String?) -> Void) {
        let notify = onClosed
        inner.start(onMessage: onMessage) { reason in
            notify()
            onClose(reason)
        }
    }

    func send(_ message: [UInt8]) { inner.send(message) }
    func close() { inner.close() }
}
