@testable import CanopyCrypto

/// Fixed inputs and a driver shared by the handshake and channel tests.
enum Fixture {
    /// A 32-byte value whose bytes are all `byte`.
    static func filled(_ byte: UInt8) -> [UInt8] { [UInt8](repeating: byte, count: 32) }

    static let alice = Identity(seed: filled(0xA1))!
    static let bob = Identity(seed: filled(0xB0))!
    static let mallory = Identity(seed: filled(0x3A))!

    static func configuration(
        _ identity: Identity, allowing allowed: [Identity], pending: PendingPeers? = nil,
        address: String = "192.0.2.1:7400", networkKey: NetworkKey = .open
    ) -> HandshakeConfiguration {
        HandshakeConfiguration(
            identity: identity, authorizer: AllowList(allowed.map(\.nodeID)), pendingPeers: pending,
            remoteAddress: address, networkKey: networkKey)
    }

    static func entropy(_ byte: UInt8) -> DeterministicEntropy { DeterministicEntropy(seed: filled(byte)) }
}

/// The bytes each action asked to send, the session it established, or its failure.
struct ActionSummary {
    var sent: [UInt8] = []
    var session: EstablishedSession?
    var failure: CryptoError?

    init(_ actions: [HandshakeAction]) {
        for action in actions {
            switch action {
            case .send(let bytes): sent += bytes
            case .established(let session): self.session = session
            case .fail(let error): failure = error
            }
        }
    }
}

/// Runs a whole handshake in memory, optionally changing each message in flight.
struct HandshakeRun {
    var initiator: HandshakeInitiator
    var responder: HandshakeResponder
    var message1: [UInt8] = []
    var message2: [UInt8] = []
    var message3: [UInt8] = []
    var initiatorResult = ActionSummary([])
    var responderResult = ActionSummary([])

    init(
        initiator: HandshakeConfiguration, responder: HandshakeConfiguration,
        initiatorEntropy: UInt8 = 1, responderEntropy: UInt8 = 2
    ) {
        var random1 = Fixture.entropy(initiatorEntropy)
        var random2 = Fixture.entropy(responderEntropy)
        self.initiator = HandshakeInitiator(configuration: initiator, now: .zero, random: &random1)
        self.responder = HandshakeResponder(configuration: responder, now: .zero, random: &random2)
    }

    /// What was delivered so far, for edits that forge a message from the earlier ones.
    struct Delivered {
        var message1: [UInt8] = []
        var message2: [UInt8] = []
    }

    /// Changes a message in flight; gets the message and what was delivered before it.
    typealias Edit = ([UInt8], Delivered) -> [UInt8]

    /// Exchanges the three messages, applying `edit1/2/3` to each before delivery.
    mutating func run(
        now: Duration = .seconds(1), edit1: Edit = { m, _ in m }, edit2: Edit = { m, _ in m },
        edit3: Edit = { m, _ in m }
    ) {
        message1 = edit1(ActionSummary(initiator.start()).sent, Delivered())
        let afterMessage1 = ActionSummary(responder.receive(message1, now: now))
        responderResult = afterMessage1
        guard afterMessage1.failure == nil else { return }
        message2 = edit2(afterMessage1.sent, Delivered(message1: message1))
        initiatorResult = ActionSummary(initiator.receive(message2, now: now))
        guard initiatorResult.failure == nil else { return }
        message3 = edit3(initiatorResult.sent, Delivered(message1: message1, message2: message2))
        responderResult = ActionSummary(responder.receive(message3, now: now))
    }
}

/// Flips one bit of byte `index`.
func flipping(_ index: Int) -> HandshakeRun.Edit {
    { bytes, _ in
        var copy = bytes
        copy[index] ^= 0x01
        return copy
    }
}

/// Decodes lowercase hex (test data only).
func hexBytes(_ text: String) -> [UInt8] {
    let digits = Array(text.utf8)
    return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)! }
}

/// Lowercase hex of bytes.
func hexString(_ bytes: some Sequence<UInt8>) -> String {
    bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
}
