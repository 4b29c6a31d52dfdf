// fuzz-modules: CanopyCore CanopyWire
// Fuzz target: a sequence of messages from a peer into a ConnectionStateMachine that plays the
// target side of a replication, so replies, revisions and acks reach the deep validation paths.
//
// Input: records of `u16 big-endian length ‖ message bytes`. The machine starts ready (the peer's
// hello is fed first), has asked for a checkpoint (id 1), subscribed (id 2, continuous) and set a
// checkpoint (id 3), the requests of the spec's example exchange, whose seed then runs deep. Like a
// real engine it answers every delivered `changes` with a reply asking for every revision (with
// one known ancestor) and every final `revisions` with an ack. Invariants: nothing traps; after a
// violation nothing is delivered and the machine stays closed.
import CanopyCore
import CanopyWire

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzStateMachine(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    let hello = Hello(databaseID: [UInt8](repeating: 1, count: 16), revsLimit: 20, window: 3)
    var machine = ConnectionStateMachine(localHello: hello)
    _ = machine.receive(.hello(Hello(databaseID: [UInt8](repeating: 2, count: 16), revsLimit: 20, window: 3)))
    machine.send(.checkpointGet(CheckpointGet(requestID: 1, replicationID: [9])))
    machine.send(.subscribe(Subscribe(requestID: 2, replicationID: [9], since: 0, continuous: true, filter: .none)))
    machine.send(.checkpointSet(CheckpointSet(requestID: 3, replicationID: [9], value: [])))
    var offset = 0
    while offset + 2 <= input.count {
        let length = Int(input[offset]) << 8 | Int(input[offset + 1])
        offset += 2
        let end = min(input.count, offset + length)
        let bytes = Array(input[offset..<end])
        offset = end
        let wasOpen = machine.state == .ready
        let actions: [ConnectionStateMachine.Action]
        do {
            actions = machine.receive(try Message.decode(bytes))
        } catch {
            actions = machine.fail(error)
        }
        for action in actions {
            switch action {
            case .deliver(.changes(let changes)):
                precondition(wasOpen, "delivered while not open")
                machine.send(.changesReply(reply(to: changes)))
            case .deliverRevisions(let requestID, let final, _):
                precondition(wasOpen, "delivered while not open")
                if final { machine.send(.revisionsAck(RevisionsAck(requestID: requestID, status: .ok))) }
            case .deliver:
                precondition(wasOpen, "delivered while not open")
            case .send, .closeTransport:
                break
            }
        }
        if machine.violation != nil { precondition(machine.state == .closed, "violation left the machine open") }
    }
    return 0
}

/// Asks for every revision of every entry, offering one known ancestor per entry.
private func reply(to changes: Changes) -> ChangesReply {
    ChangesReply(requestID: changes.requestID, items: changes.entries.map { entry in
        ChangesReplyItem(missing: Array(entry.revisions.indices),
                         knownAncestors: [RevisionID(generation: 1, digestHigh: 0x0123_4567_89AB_CDEF, digestLow: 42)])
    })
}
