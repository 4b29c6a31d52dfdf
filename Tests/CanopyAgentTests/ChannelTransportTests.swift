import CanopyCrypto
import CanopyReplication
import CanopyWire
import Dispatch
import Foundation
import Testing

@testable import CanopyAgent

#if canImport(Glibc)
import Glibc
#endif

private func identity(_ seed: UInt8) -> Identity {
    var entropy = DeterministicEntropy(seed: [UInt8](repeating: seed, count: DeterministicEntropy.seedBytes))
    return Identity.generate(random: &entropy)
}

/// Both ends' handshake outcomes, written from the connections' queues.
private final class Outcomes: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [Int: Result<ChannelTransport, CryptoError>] = [:]

    func set(_ index: Int, _ value: Result<ChannelTransport, CryptoError>) { lock.withLock { values[index] = value } }
    func get(_ index: Int) -> Result<ChannelTransport, CryptoError> { lock.withLock { values[index]! } }
}

/// Runs both handshake roles over a connected socket pair and returns both transports.
private func connectedPair(
    initiator: Identity, responder: Identity, allowedByResponder: [NodeID], delivery: DispatchQueue
) throws -> (Result<ChannelTransport, CryptoError>, Result<ChannelTransport, CryptoError>) {
    var fds: [Int32] = [0, 0]
    guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0 else { throw SystemError("socketpair") }
    for fd in fds { try Socket.setNonBlocking(fd) }
    let outcomes = Outcomes()
    let done = DispatchGroup()
    let roles: [(Identity, [NodeID], Bool)] = [(initiator, [responder.nodeID], true), (responder, allowedByResponder, false)]
    for (index, (local, allowed, isInitiator)) in roles.enumerated() {
        let queue = DispatchQueue(label: "test.connection.\(index)")
        let connection = StreamConnection(fd: fds[index], queue: queue, pendingWriteBytesMax: AgentLimits.peerPendingWriteBytesMax)
        let configuration = HandshakeConfiguration(identity: local, authorizer: AllowList(allowed), pendingPeers: nil, remoteAddress: "pair")
        done.enter()
        queue.async {
            HandshakeDriver(connection: connection, initiator: isInitiator, configuration: configuration, deliveryQueue: delivery) { outcome in
                outcomes.set(index, outcome)
                done.leave()
            }.start()
        }
    }
    guard done.wait(timeout: .now() + 30) == .success else { throw SystemError("handshake did not finish", code: ETIMEDOUT) }
    return (outcomes.get(0), outcomes.get(1))
}

@Suite("the encrypted channel transport over a real socket pair")
struct ChannelTransportTests {
    @Test("messages of every size, a multi-fragment one included, arrive in order; close arrives as peerClosed")
    func messagesArriveInOrder() throws {
        let delivery = DispatchQueue(label: "test.delivery")
        let (left, right) = try connectedPair(initiator: identity(1), responder: identity(2), allowedByResponder: [identity(1).nodeID], delivery: delivery)
        let sender = try left.get()
        let receiver = try right.get()
        #expect(receiver.peer == identity(1).nodeID)
        #expect(sender.identity == receiver.identity)
        let log = ConnectionEventLog()
        receiver.start { log.append($0) }
        sender.start { _ in }
        let big = [UInt8](repeating: UInt8(ascii: "x"), count: 3 * WireLimits.fragmentBytesMax + 17)
        let messages: [ConnectionMessage] = [
            .heartbeat,
            .channel(1, .revisions(Revisions(requestID: 7, final: true, revisions: [RevisionTransfer(ancestry: [], knownAncestorTail: 0, body: big)]))),
            .heartbeatEcho,
        ]
        for message in messages { sender.send(message) }
        for message in messages {
            guard case .message(let received)? = log.next() else {
                Issue.record("expected \(message.name)")
                return
            }
            #expect(received == message)
        }
        sender.close(.localClosed)
        guard case .message(.close)? = log.next() else {
            Issue.record("expected the close message")
            return
        }
        guard case .closed(.peerClosed)? = log.next() else {
            Issue.record("expected peerClosed after the FINAL frame")
            return
        }
    }

    @Test("a peer that is not allowed is refused after proving its identity, and the refusal names it")
    func unknownPeerRefused() throws {
        let delivery = DispatchQueue(label: "test.delivery")
        let (_, right) = try connectedPair(initiator: identity(3), responder: identity(4), allowedByResponder: [], delivery: delivery)
        guard case .failure(.peerNotAuthorized(let peer)) = right else {
            Issue.record("the responder accepted an unknown peer: \(right)")
            return
        }
        #expect(peer == identity(3).nodeID)
    }
}
