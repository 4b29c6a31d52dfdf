// fuzz-modules: CanopyCore CanopyWire CanopyCrypto
// Fuzz target: the responder side of the handshake and the secure channel behind it, i.e.
// everything a listening node does with bytes from an unauthenticated (or freshly authenticated)
// peer.
//
// Input: byte 0 picks the mode (mod 4), byte 1 how reads are cut (1 = byte by byte, up to 255),
// the rest is the payload.
//   0  payload is the whole inbound stream of a fresh responder (Msg1, then more).
//   1  an honest Msg1 was answered; payload is what follows (Msg3 and channel bytes).
//   2  payload[0..<112] is XORed into an honest Msg3, the rest follows as channel bytes.
//   3  after an honest handshake the initiator seals the payload, cut by its own bytes into
//      frames (last one FINAL); then one byte at a position the payload picks is flipped, or the
//      stream is cut there.
// Invariants, checked by trapping: the responder never establishes a session with anyone but the
// honest initiator; a failed handshake or channel stays failed; the channel only ever yields a
// prefix of what the honest initiator sealed, and all of it (then FINAL) when nothing was changed.
// Expensive public-key steps happen once, in the statics; each run copies the prepared state.
import CanopyCrypto

private func filled(_ byte: UInt8) -> [UInt8] { [UInt8](repeating: byte, count: 32) }
private let initiatorIdentity = Identity(seed: filled(0xA1))!
private let responderIdentity = Identity(seed: filled(0xB0))!

private func responderConfiguration() -> HandshakeConfiguration {
    HandshakeConfiguration(
        identity: responderIdentity, authorizer: AllowList([initiatorIdentity.nodeID]), pendingPeers: PendingPeers(),
        remoteAddress: "fuzz")
}

private func freshResponder() -> HandshakeResponder {
    var random = DeterministicEntropy(seed: filled(2))
    return HandshakeResponder(configuration: responderConfiguration(), now: .zero, random: &random)
}

private func sent(_ actions: [HandshakeAction]) -> [UInt8] {
    actions.reduce(into: []) { if case .send(let bytes) = $1 { $0 += bytes } }
}

/// The honest run, computed once: the responder after Msg1, Msg3, and the initiator's session.
private struct Prepared {
    let responderAfterMessage1: HandshakeResponder
    let message3: [UInt8]
    let initiatorSession: EstablishedSession
    let responderSession: EstablishedSession

    init() {
        var random = DeterministicEntropy(seed: filled(1))
        var initiator = HandshakeInitiator(
            configuration: HandshakeConfiguration(
                identity: initiatorIdentity, authorizer: AllowList([responderIdentity.nodeID]), pendingPeers: nil,
                remoteAddress: "fuzz"),
            now: .zero, random: &random)
        var responder = freshResponder()
        let message2 = sent(responder.receive(sent(initiator.start()), now: .zero))
        responderAfterMessage1 = responder
        let afterMessage2 = initiator.receive(message2, now: .zero)
        message3 = sent(afterMessage2)
        guard case .established(let session)? = afterMessage2.last else { fatalError("honest handshake failed") }
        initiatorSession = session
        var finished = responder
        guard case .established(let other)? = finished.receive(message3, now: .zero).first else {
            fatalError("honest responder failed")
        }
        responderSession = other
    }
}

private let prepared = Prepared()

/// Feeds `bytes` to the responder in reads of `step` bytes; returns the channel it established.
private func drive(_ responder: inout HandshakeResponder, _ bytes: ArraySlice<UInt8>, step: Int) -> SecureChannel? {
    var offset = bytes.startIndex
    while offset < bytes.endIndex {
        let end = min(bytes.endIndex, offset + step)
        for action in responder.receive(bytes[offset..<end], now: .seconds(1)) {
            switch action {
            case .send: break
            case .fail:
                precondition(responder.failure != nil, "failure not recorded")
                if case .fail? = responder.receive([0], now: .seconds(1)).first {} else { preconditionFailure("failed responder revived") }
                return nil
            case .established(let session):
                precondition(session.peer == initiatorIdentity.nodeID, "established with a stranger")
                var random = DeterministicEntropy(seed: filled(12))
                var channel = SecureChannel(session: session, random: &random)
                _ = try? channel.receive(bytes[end...])
                return channel
            }
        }
        offset = end
    }
    _ = responder.receiveEnd()
    return nil
}

/// Mode 3: honest frames from the payload, one change, and the prefix property.
private func fuzzChannel(_ payload: ArraySlice<UInt8>, step: Int) {
    var random = DeterministicEntropy(seed: filled(11))
    var sender = SecureChannel(session: prepared.initiatorSession, random: &random)
    var plaintexts: [[UInt8]] = []
    var stream: [UInt8] = []
    var rest = payload.dropFirst(2)
    while !rest.isEmpty || plaintexts.isEmpty {
        let length = Int(rest.first ?? 0) % 64
        let plaintext = Array(rest.dropFirst().prefix(length))
        rest = rest.dropFirst(1 + length)
        plaintexts.append(plaintext)
        stream += try! sender.seal(plaintext, final: rest.isEmpty)
    }
    let position = payload.count >= 2 ? (Int(payload[payload.startIndex]) << 8 | Int(payload[payload.startIndex + 1])) : stream.count
    let changed = position < 2 * stream.count
    if position < stream.count {
        stream[position] ^= 0x01
    } else if position < 2 * stream.count {
        stream.removeLast(2 * stream.count - position)
    }
    var randomReader = DeterministicEntropy(seed: filled(12))
    var receiver = SecureChannel(session: prepared.responderSession, random: &randomReader)
    var received: [[UInt8]] = []
    var finished = false
    var failed = false
    var offset = 0
    while offset < stream.count, !failed {
        let end = min(stream.count, offset + step)
        do {
            // Odd read sizes pass arrays (which the reader may adopt without copying), even ones slices.
            let events = try step % 2 == 1 ? receiver.receive(Array(stream[offset..<end])) : receiver.receive(stream[offset..<end])
            for event in events {
                switch event {
                case .message(let plaintext): received.append(plaintext)
                case .finished: finished = true
                }
            }
        } catch {
            failed = true
            precondition((try? receiver.receive([])) == nil, "failed channel revived")
        }
        offset = end
    }
    if !failed { failed = (try? receiver.receiveEnd()) == nil }
    // A FINAL frame with an empty plaintext is a bare close: it yields `.finished` only.
    if plaintexts.last?.isEmpty == true { plaintexts.removeLast() }
    precondition(received.count <= plaintexts.count && Array(plaintexts.prefix(received.count)) == received, "not a prefix")
    if !changed { precondition(!failed && finished && received == plaintexts, "honest stream refused") }
    if changed { precondition(failed, "changed stream accepted") }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzHandshakeResponder(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 2 else { return 0 }
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    let step = max(1, Int(input[1]))
    let payload = input[2...]
    switch input[0] % 4 {
    case 0:
        var responder = freshResponder()
        _ = drive(&responder, payload, step: step)
    case 1:
        var responder = prepared.responderAfterMessage1
        _ = drive(&responder, payload, step: step)
    case 2:
        var message3 = prepared.message3
        for (index, byte) in payload.prefix(message3.count).enumerated() { message3[index] ^= byte }
        var responder = prepared.responderAfterMessage1
        let channel = drive(&responder, message3[...] + payload.dropFirst(message3.count), step: step)
        precondition((channel != nil) == (message3 == prepared.message3), "Msg3 acceptance does not match honesty")
    default:
        fuzzChannel(payload, step: step)
    }
    return 0
}
