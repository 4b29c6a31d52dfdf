import CanopyCore
import Testing
@testable import CanopyWire

/// `MultiplexStateMachine` alone (`Protocol/replication-v2.md` §4–§5): the cases where both sides
/// act at once, driven message by message.
@Suite("Multiplexed connection rules")
struct MultiplexStateMachineTests {
    static let notes = DatabaseName(validating: "notes")!

    /// A machine that has exchanged hellos with a peer and whose sent messages are collected.
    static func ready(_ role: MultiplexStateMachine.Role) -> MultiplexStateMachine {
        var machine = MultiplexStateMachine(role: role, localHello: ConnectionHello(nodeID: [UInt8](repeating: role == .initiator ? 1 : 2, count: 16)))
        _ = machine.receive(.hello(ConnectionHello(nodeID: [UInt8](repeating: role == .initiator ? 2 : 1, count: 16))))
        return machine
    }

    /// The messages among `actions`.
    static func sent(_ actions: [MultiplexStateMachine.Action]) -> [ConnectionMessage] {
        actions.compactMap { if case .send(let message) = $0 { return message } else { return nil } }
    }

    @Test("detaches that cross are each the other's answer: nothing more is sent and the id is dead")
    func crossingDetaches() {
        var initiator = Self.ready(.initiator)
        var responder = Self.ready(.responder)
        let attach = Self.sent(initiator.open(Self.notes))
        #expect(attach == [.attach(Attach(channel: 1, database: Self.notes))])
        let requested = responder.receive(attach[0])
        #expect(requested == [.attachRequested(1, Self.notes)])
        let accept = Self.sent(responder.answer(1, .accept))
        #expect(initiator.receive(accept[0]) == [.opened(1, Self.notes)])
        let fromInitiator = Self.sent(initiator.detach(1, code: .normal, message: "done"))
        let fromResponder = Self.sent(responder.detach(1, code: .goingAway, message: "stopping"))
        #expect(initiator.receive(fromResponder[0]).isEmpty)
        #expect(responder.receive(fromInitiator[0]).isEmpty)
        #expect(initiator.channelCount == 0 && responder.channelCount == 0)
        #expect(initiator.state == .ready && responder.state == .ready)
    }

    @Test("an open while the database's channel is still detaching waits for the answer, then takes a new id")
    func reopenAfterDetach() {
        var machine = Self.ready(.initiator)
        _ = machine.open(Self.notes)
        _ = machine.receive(.attach(Attach(channel: 1, database: Self.notes)))
        _ = machine.detach(1, code: .normal, message: "")
        #expect(machine.open(Self.notes).isEmpty, "waits")
        let answered = machine.receive(.detach(Detach(channel: 1, code: .normal, message: "")))
        #expect(Self.sent(answered) == [.attach(Attach(channel: 3, database: Self.notes))])
    }

    @Test("the initiator refuses the responder's crossing attach with conflict; the responder accepts the initiator's")
    func crossingAttaches() {
        var initiator = Self.ready(.initiator)
        var responder = Self.ready(.responder)
        let fromInitiator = Self.sent(initiator.open(Self.notes))
        let fromResponder = Self.sent(responder.open(Self.notes))
        let atInitiator = initiator.receive(fromResponder[0])
        guard case .detach(let refusal) = Self.sent(atInitiator).first else { Issue.record("no refusal"); return }
        #expect(refusal.channel == 2 && refusal.code == .conflict)
        let atResponder = responder.receive(fromInitiator[0])
        #expect(atResponder == [.send(.attach(Attach(channel: 1, database: Self.notes))), .opened(1, Self.notes)])
        #expect(Self.sent(responder.receive(.detach(refusal))) == [.detach(Detach(channel: 2, code: .normal, message: ""))])
        #expect(initiator.receive(.attach(Attach(channel: 1, database: Self.notes))) == [.opened(1, Self.notes)])
        #expect(initiator.receive(.detach(Detach(channel: 2, code: .normal, message: ""))).isEmpty)
        #expect(initiator.openChannels == [1: Self.notes] && responder.openChannels == [1: Self.notes])
        #expect(initiator.channelCount == 1 && responder.channelCount == 1)
    }

    @Test("after our close, everything but the peer's close is discarded")
    func closing() {
        var machine = Self.ready(.responder)
        #expect(Self.sent(machine.close(code: .goingAway, reason: "bye")) == [.close(Close(code: .goingAway, reason: "bye"))])
        #expect(machine.receive(.channel(9, .heartbeat)).isEmpty)
        #expect(machine.receive(.close(Close(code: .normal, reason: ""))) == [.closeTransport(code: .normal)])
        #expect(machine.state == .closed && machine.violation == nil)
    }

    @Test("a version-1 hello is refused for its version whatever its revsLimit; a version-2 hello announcing over 1024 channels is limitExceeded")
    func helloBounds() {
        let peer = [UInt8](repeating: 2, count: 16)
        for revsLimit in [1, 1000, WireLimits.revsLimitMax] {
            var machine = MultiplexStateMachine(role: .initiator, localHello: ConnectionHello(nodeID: [UInt8](repeating: 1, count: 16)))
            let sent = Self.sent(machine.receive(.hello(ConnectionHello(hello: Hello(version: 1, databaseID: peer, revsLimit: revsLimit, window: 8)))))
            guard case .close(let close)? = sent.first else { Issue.record("no close for revsLimit \(revsLimit): \(sent)"); continue }
            #expect(close.code == .unsupportedVersion && close.reason.contains("must be upgraded"), "\(close)")
        }
        var machine = MultiplexStateMachine(role: .initiator, localHello: ConnectionHello(nodeID: [UInt8](repeating: 1, count: 16)))
        let tooMany = ConnectionHello(hello: Hello(version: 2, databaseID: peer, revsLimit: WireLimits.channelsMax + 1, window: 1))
        let sent = Self.sent(machine.receive(.hello(tooMany)))
        guard case .close(let close)? = sent.first else { Issue.record("no close: \(sent)"); return }
        #expect(close.code == .limitExceeded && close.reason.contains("hello.channelsMax"), "\(close)")
        #expect(machine.receive(.hello(ConnectionHello(nodeID: peer))).isEmpty, "nothing is read after the close")
    }
}
