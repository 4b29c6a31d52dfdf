// fuzz-modules: CanopyCore CanopyWire
// Fuzz target: Message.decode and the connection state machine.
//
// The input is one message. Invariants checked, by trapping: decoding never crashes; a message
// that decodes re-encodes to exactly the input bytes (the encoding is canonical, §1 of the spec);
// feeding it to a state machine in either state never crashes and never delivers after a violation.
import CanopyWire

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzMessageDecoder(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    let message: Message
    do {
        message = try Message.decode(input)
    } catch {
        precondition(!error.description.isEmpty, "error without description")
        return 0
    }
    precondition(message.encoded() == input, "decoded message does not re-encode to its bytes")
    let hello = Hello(databaseID: [UInt8](repeating: 7, count: 16), revsLimit: 100, window: 4)
    var fresh = ConnectionStateMachine(localHello: hello)
    _ = fresh.receive(message)
    var ready = ConnectionStateMachine(localHello: hello)
    _ = ready.receive(.hello(hello))
    let actions = ready.receive(message)
    if ready.violation != nil {
        for action in actions {
            if case .deliver = action { preconditionFailure("delivered a message after a violation") }
            if case .deliverRevisions = action { preconditionFailure("delivered revisions after a violation") }
        }
    }
    return 0
}
