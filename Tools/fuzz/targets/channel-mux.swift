// fuzz-modules: CanopyCore CanopyWire
// Fuzz target: the version-2 decoder and the rules of a multiplexed connection
// (`ConnectionMessage.decode`, `MultiplexStateMachine`), with local requests mixed in.
//
// Input: byte 0 sets the role (bit 0: responder) and the answers to the peer's attaches (bits
// 1–7, used in turn: set accepts). Then records, by their first byte modulo 4: 0 a message from
// the peer, `u16 big-endian length ‖ bytes`; 1 a local open of database `names[next byte % 8]`;
// 2 a local detach of the open channel picked by the next byte; 3 a local heartbeat sent on the
// open channel picked by the next byte. The machine announces channelsMax 4, so the limits are
// reached. Invariants, by trapping: a message that decodes re-encodes to its bytes; nothing is
// delivered but on a channel open before the message arrived; nothing is delivered after a
// violation, which leaves the machine closed; no database has two open channels; the machine
// holds at most twice its channelsMax ids.
import CanopyCore
import CanopyWire

private let names = ["notes", "photos", "a", "b", "c", "d", "e", "f"].map { DatabaseName(validating: $0)! }

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzChannelMux(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    guard let flags = input.first else { return 0 }
    let role: MultiplexStateMachine.Role = flags & 1 == 0 ? .initiator : .responder
    let channelsMax = 4
    var machine = MultiplexStateMachine(role: role, localHello: ConnectionHello(nodeID: [UInt8](repeating: 1, count: 16),
                                                                                 channelsMax: channelsMax))
    var answers = 0
    _ = machine.start()
    var offset = 1
    while offset < input.count {
        let op = input[offset] % 4
        offset += 1
        let openBefore = machine.openChannels
        let wasReady = machine.state == .ready
        var actions: [MultiplexStateMachine.Action]
        switch op {
        case 0:
            guard offset + 2 <= input.count else { return 0 }
            let length = Int(input[offset]) << 8 | Int(input[offset + 1])
            offset += 2
            let end = min(input.count, offset + length)
            let bytes = Array(input[offset..<end])
            offset = end
            do throws(ProtocolError) {
                let message = try ConnectionMessage.decode(bytes)
                precondition(message.encoded() == bytes, "decoded message does not re-encode to its bytes")
                actions = machine.receive(message)
            } catch {
                actions = machine.fail(error)
            }
        default:
            guard offset < input.count else { return 0 }
            let pick = Int(input[offset])
            offset += 1
            let open = openBefore.keys.sorted()
            if op == 1 {
                actions = machine.open(names[pick % names.count])
            } else if open.isEmpty {
                actions = []
            } else if op == 2 {
                actions = machine.detach(open[pick % open.count], code: .normal, message: "")
            } else {
                actions = machine.send(.heartbeat, on: open[pick % open.count])
            }
        }
        // Answer the peer's attaches as a shell does, before anything else arrives.
        var index = 0
        while index < actions.count {
            if case .attachRequested(let channel, _) = actions[index] {
                let accept = flags >> (1 + answers % 7) & 1 == 1
                answers += 1
                actions += machine.answer(channel, accept ? .accept : .refuse(code: .forbidden, message: "no"))
            }
            index += 1
        }
        check(actions, openBefore: openBefore, wasReady: wasReady, machine: machine)
        precondition(machine.channelCount <= 2 * channelsMax, "channel table beyond twice channelsMax")
    }
    return 0
}

/// The invariants over one step's actions.
private func check(_ actions: [MultiplexStateMachine.Action], openBefore: [ChannelID: DatabaseName], wasReady: Bool,
                   machine: MultiplexStateMachine) {
    var failed = false
    var open = openBefore
    for action in actions {
        switch action {
        case .deliver(let channel, _):
            precondition(wasReady && !failed, "delivered while not ready or after a violation")
            precondition(openBefore[channel] != nil, "delivered on a channel that was not open")
        case .opened(let channel, let database):
            precondition(!open.values.contains(database), "two open channels for one database")
            open[channel] = database
        case .detached(let channel, _, _):
            open[channel] = nil
        case .closeTransport:
            failed = true
        case .send, .connected, .attachRequested, .refused, .report:
            break
        }
    }
    if machine.violation != nil { precondition(machine.state == .closed, "violation left the machine open") }
}
