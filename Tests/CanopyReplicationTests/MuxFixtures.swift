import CanopyCore
import CanopySimulation
import CanopyWire
@testable import CanopyReplication

/// A database name the tests know to be valid.
func database(_ name: String) -> DatabaseName { DatabaseName(validating: name)! }

/// One node's view of a multiplexed connection in a test: its mux, the answers it gives to the
/// peer's attaches, and everything its channels received.
final class MuxSide: @unchecked Sendable {
    private(set) var mux: ChannelMux!
    /// Databases refused to the peer, with the code and message of the refusal; others are accepted.
    var refusals: [DatabaseName: (code: ErrorCode, message: String)] = [:]
    /// Databases the peer asked for, in order (`onAttach` calls).
    private(set) var asked: [DatabaseName] = []
    /// The results of our `open`s.
    private(set) var opens: [DatabaseName: ChannelMux.OpenResult] = [:]
    /// The open channels we hold (from `open` or `onAttach`), by database.
    private(set) var channels: [DatabaseName: MuxChannel] = [:]
    /// The messages each database's channel delivered.
    private(set) var received: [DatabaseName: [Message]] = [:]
    /// How each database's channel ended.
    private(set) var closed: [DatabaseName: TransportCloseReason] = [:]
    /// How the connection ended.
    private(set) var connectionClosed: TransportCloseReason?
    /// When set, each channel that opens is handed here (to run a session on it) instead of
    /// being recorded.
    var serve: ((MuxChannel) -> Void)?

    init(connection: any ConnectionTransport, role: MultiplexStateMachine.Role, scheduler: SimulatedScheduler,
         nodeByte: UInt8, channelsMax: Int = WireLimits.channelsMax) {
        mux = ChannelMux(
            connection: connection, role: role, nodeID: [UInt8](repeating: nodeByte, count: 16), channelsMax: channelsMax,
            scheduler: scheduler,
            onAttach: { [unowned self] name in
                asked.append(name)
                if let refusal = refusals[name] { return .refuse(code: refusal.code, message: refusal.message) }
                return .accept { [unowned self] channel in adopt(channel) }
            },
            onClosed: { [unowned self] reason in connectionClosed = reason })
    }

    /// Asks the peer for `name`'s channel, recording the result.
    func open(_ name: String) {
        let name = database(name)
        mux.open(name) { [unowned self] result in
            opens[name] = result
            if case .opened(let channel) = result { adopt(channel) }
        }
    }

    /// Starts listening on a channel that opened.
    private func adopt(_ channel: MuxChannel) {
        let name = channel.database
        channels[name] = channel
        if let serve { return serve(channel) }
        channel.start { [unowned self] event in
            switch event {
            case .message(let message): received[name, default: []].append(message)
            case .closed(let reason): closed[name] = reason
            }
        }
    }

    /// The channel of `name`.
    func channel(_ name: String) -> MuxChannel? { channels[database(name)] }

    /// The messages `name`'s channel delivered.
    func messages(_ name: String) -> [Message] { received[database(name)] ?? [] }

    /// How `name`'s channel ended, if it did.
    func closeReason(_ name: String) -> TransportCloseReason? { closed[database(name)] }

    /// The refusal our `open` of `name` got, if it got one.
    func refusal(_ name: String) -> (code: ErrorCode, message: String)? {
        if case .refused(let code, let message) = opens[database(name)] { return (code, message) }
        return nil
    }

    /// Why the connection ended before our `open` of `name` was answered, if it did.
    func connectionEnded(_ name: String) -> String? {
        if case .connectionEnded(let why) = opens[database(name)] { return why }
        return nil
    }
}

/// Two muxes on one in-memory connection: `a` the handshake initiator, `b` the responder.
final class MuxPair: @unchecked Sendable {
    let scheduler: SimulatedScheduler
    let pipe: ConnectionPipe
    let a: MuxSide
    let b: MuxSide

    init(scheduler: SimulatedScheduler = SimulatedScheduler(), channelsMaxA: Int = WireLimits.channelsMax,
         channelsMaxB: Int = WireLimits.channelsMax) {
        self.scheduler = scheduler
        pipe = ConnectionPipe(scheduler: scheduler)
        a = MuxSide(connection: pipe.ends.0, role: .initiator, scheduler: scheduler, nodeByte: 0xA, channelsMax: channelsMaxA)
        b = MuxSide(connection: pipe.ends.1, role: .responder, scheduler: scheduler, nodeByte: 0xB, channelsMax: channelsMaxB)
        a.mux.start()
        b.mux.start()
    }

    /// Runs a second of virtual time: every message in flight arrives (heartbeats lie further out).
    func settle() {
        scheduler.advance(by: 1)
    }

    /// `a` asks for each database, and the answers arrive.
    func openFromA(_ names: String...) {
        for name in names { a.open(name) }
        settle()
    }

    /// The open channels when both sides agree on them; nil when they differ.
    var openChannels: [ChannelID: DatabaseName]? {
        a.mux.openChannels == b.mux.openChannels ? a.mux.openChannels : nil
    }

    /// True while neither side has closed the connection.
    var isUp: Bool { !a.mux.isClosed && !b.mux.isClosed }
}

/// A mux facing a scripted peer: the test plays the other end with raw messages.
final class MuxScript: @unchecked Sendable {
    let scheduler = SimulatedScheduler()
    let pipe: ConnectionPipe
    let side: MuxSide
    /// The peer's end of the connection.
    var peer: ConnectionPipe.End { pipe.ends.1 }

    /// The mux is the initiator; the scripted peer has sent its connection hello and read the mux's.
    init(channelsMax: Int = WireLimits.channelsMax) {
        pipe = ConnectionPipe(scheduler: scheduler)
        side = MuxSide(connection: pipe.ends.0, role: .initiator, scheduler: scheduler, nodeByte: 0xA, channelsMax: channelsMax)
        pipe.ends.1.start { _ in }
        side.mux.start()
    }

    /// Sends the peer's connection hello (version 2 unless told otherwise); returns what the mux
    /// sent until then (its own hello first).
    @discardableResult
    func sayHello(_ hello: ConnectionHello = ConnectionHello(nodeID: [UInt8](repeating: 0xB, count: 16))) -> [ConnectionMessage] {
        send(.hello(hello))
    }

    /// Sends `messages` from the peer and lets them arrive; returns what the mux sent meanwhile.
    @discardableResult
    func send(_ messages: ConnectionMessage...) -> [ConnectionMessage] {
        for message in messages { peer.send(message) }
        settle()
        return peer.take()
    }

    func settle() {
        scheduler.advance(by: 1)
    }

    /// The `close` the mux sent, if it sent one, among `messages`.
    static func close(in messages: [ConnectionMessage]) -> Close? {
        for case .close(let close) in messages { return close }
        return nil
    }
}
