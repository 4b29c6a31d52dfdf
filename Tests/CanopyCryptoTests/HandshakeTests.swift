import CanopyWire
import Testing
@testable import CanopyCrypto

@Suite("Handshake")
struct HandshakeTests {
    static func run(pending: PendingPeers? = nil) -> HandshakeRun {
        HandshakeRun(
            initiator: Fixture.configuration(Fixture.alice, allowing: [Fixture.bob], pending: pending),
            responder: Fixture.configuration(Fixture.bob, allowing: [Fixture.alice], pending: pending))
    }

    @Test("two allowed nodes agree on the peer, the transcript and mirrored direction keys")
    func completes() throws {
        var run = Self.run()
        run.run()
        let initiator = try #require(run.initiatorResult.session)
        let responder = try #require(run.responderResult.session)
        #expect(run.message1.count == HandshakeLimits.message1Bytes)
        #expect(run.message2.count == HandshakeLimits.message2Bytes)
        #expect(run.message3.count == HandshakeLimits.message3Bytes)
        #expect(initiator.peer == Fixture.bob.nodeID)
        #expect(responder.peer == Fixture.alice.nodeID)
        #expect(initiator.transcriptHash == responder.transcriptHash)
        #expect(initiator.sendKey == responder.receiveKey)
        #expect(initiator.receiveKey == responder.sendKey)
        #expect(initiator.sendKey != initiator.receiveKey)
    }

    @Test("the same keys and entropy give the same bytes; different entropy gives different keys")
    func reproducible() throws {
        var first = Self.run()
        first.run()
        var second = Self.run()
        second.run()
        #expect(first.message2 == second.message2)
        #expect(first.message3 == second.message3)
        var fresh = HandshakeRun(
            initiator: Fixture.configuration(Fixture.alice, allowing: [Fixture.bob]),
            responder: Fixture.configuration(Fixture.bob, allowing: [Fixture.alice]),
            initiatorEntropy: 3, responderEntropy: 4)
        fresh.run()
        let a = try #require(first.initiatorResult.session)
        let b = try #require(fresh.initiatorResult.session)
        #expect(a.sendKey != b.sendKey)
    }

    @Test("messages delivered one byte at a time complete the handshake the same way")
    func byteByByte() throws {
        var whole = Self.run()
        whole.run()
        var run = Self.run()
        let message1 = ActionSummary(run.initiator.start()).sent
        var message2: [UInt8] = []
        for byte in message1 { message2 += ActionSummary(run.responder.receive([byte], now: .zero)).sent }
        var initiatorOut = ActionSummary([])
        for byte in message2 { initiatorOut = ActionSummary(run.initiator.receive([byte], now: .zero)) }
        var responderOut = ActionSummary([])
        for byte in initiatorOut.sent { responderOut = ActionSummary(run.responder.receive([byte], now: .zero)) }
        #expect(message2 == whole.message2)
        #expect(try #require(responderOut.session).transcriptHash == whole.responderResult.session?.transcriptHash)
    }

    @Test("a responder signature over the wrong bytes is refused by the initiator")
    func wrongResponderSignature() {
        var run = Self.run()
        let secret = HandshakeForgery.firstEphemeralSecret(entropy: 2)
        run.run(edit2: { _, sent in
            HandshakeForgery.message2(answering: sent.message1, as: Fixture.bob, ephemeralSecret: secret) { identity, transcript in
                identity.sign(HandshakeTranscript.initiatorSignatureLabel, transcript)  // wrong role label
            }
        })
        #expect(run.initiatorResult.failure == .handshakeBadSignature)
        #expect(run.initiatorResult.sent.isEmpty)
        #expect(run.initiator.failure == .handshakeBadSignature)
    }

    @Test("a Msg2 built with libsodium's own X25519 is the responder's byte for byte and is accepted")
    func libsodiumKeyPathInteroperates() throws {
        var run = Self.run()
        let secret = HandshakeForgery.firstEphemeralSecret(entropy: 2)
        run.run(edit2: { original, sent in
            let rebuilt = HandshakeForgery.message2(answering: sent.message1, as: Fixture.bob, ephemeralSecret: secret) {
                identity, transcript in identity.sign(HandshakeTranscript.responderSignatureLabel, transcript)
            }
            #expect(rebuilt == original)
            return rebuilt
        })
        let initiator = try #require(run.initiatorResult.session)
        #expect(initiator.peer == Fixture.bob.nodeID)
        #expect(run.responderResult.session?.transcriptHash == initiator.transcriptHash)
    }

    @Test("an initiator signature made with another key is refused by the responder")
    func wrongInitiatorSignature() {
        let pending = PendingPeers()
        var run = Self.run(pending: pending)
        let secret = HandshakeForgery.firstEphemeralSecret(entropy: 1)
        run.run(edit3: { _, sent in
            HandshakeForgery.message3(
                message1: sent.message1, message2: sent.message2, initiatorEphemeralSecret: secret, as: Fixture.alice
            ) { _, transcript in
                Fixture.mallory.sign(HandshakeTranscript.initiatorSignatureLabel, transcript)
            }
        })
        #expect(run.responderResult.failure == .handshakeBadSignature)
        #expect(run.responderResult.session == nil)
        #expect(pending.all.isEmpty)
    }

    @Test("an unknown initiator is refused after it authenticates and is reported as pending")
    func unknownInitiator() {
        let pending = PendingPeers()
        var run = HandshakeRun(
            initiator: Fixture.configuration(Fixture.mallory, allowing: [Fixture.bob]),
            responder: Fixture.configuration(Fixture.bob, allowing: [Fixture.alice], pending: pending, address: "198.51.100.7:5555"))
        run.run(now: .seconds(3))
        #expect(run.responderResult.failure == .peerNotAuthorized(Fixture.mallory.nodeID))
        #expect(run.responderResult.session == nil && run.responderResult.sent.isEmpty)
        #expect(pending.all == [PendingPeer(
            nodeID: Fixture.mallory.nodeID, address: "198.51.100.7:5555", firstSeen: .seconds(3), lastSeen: .seconds(3), attempts: 1)])
    }

    @Test("an unknown responder is refused by the initiator before it reveals its identity")
    func unknownResponder() {
        let pending = PendingPeers()
        var run = HandshakeRun(
            initiator: Fixture.configuration(Fixture.alice, allowing: [Fixture.bob], pending: pending),
            responder: Fixture.configuration(Fixture.mallory, allowing: [Fixture.alice]))
        run.run()
        #expect(run.initiatorResult.failure == .peerNotAuthorized(Fixture.mallory.nodeID))
        #expect(run.initiatorResult.sent.isEmpty)
        #expect(pending.all.map(\.nodeID) == [Fixture.mallory.nodeID])
    }

    @Test("a node that reaches itself refuses the connection")
    func selfConnection() {
        var run = HandshakeRun(
            initiator: Fixture.configuration(Fixture.alice, allowing: [Fixture.alice]),
            responder: Fixture.configuration(Fixture.alice, allowing: [Fixture.alice]))
        run.run()
        #expect(run.initiatorResult.failure == .handshakeSelfConnection)
        #expect(run.initiatorResult.sent.isEmpty)
    }

    @Test("a responder refuses an initiator presenting the responder's own key")
    func initiatorClaimsOurKey() {
        var run = Self.run()
        let secret = HandshakeForgery.firstEphemeralSecret(entropy: 1)
        run.run(edit3: { _, sent in
            HandshakeForgery.message3(
                message1: sent.message1, message2: sent.message2, initiatorEphemeralSecret: secret, as: Fixture.bob
            ) { identity, transcript in identity.sign(HandshakeTranscript.initiatorSignatureLabel, transcript) }
        })
        #expect(run.responderResult.failure == .handshakeSelfConnection)
    }

    @Test("small-order ephemeral keys are refused by the responder", arguments: HandshakeForgery.smallOrderPoints)
    func smallOrderInitiatorKey(point: [UInt8]) {
        var run = Self.run()
        run.run(edit1: { _, _ in HandshakeForgery.message1(ephemeral: point) })
        #expect(run.responderResult.failure == .handshakeSmallOrderKey)
        #expect(run.responderResult.sent.isEmpty)
    }

    @Test("small-order ephemeral keys are refused by the initiator", arguments: HandshakeForgery.smallOrderPoints)
    func smallOrderResponderKey(point: [UInt8]) {
        var run = Self.run()
        run.run(edit2: { _, sent in
            HandshakeForgery.message2(answering: sent.message1, as: Fixture.bob, ephemeralSecret: Fixture.filled(4), ephemeral: point) {
                $0.sign(HandshakeTranscript.responderSignatureLabel, $1)
            }
        })
        #expect(run.initiatorResult.failure == .handshakeSmallOrderKey)
        #expect(run.initiatorResult.sent.isEmpty)
    }

    @Test("any flipped bit in Msg2 or Msg3 fails the handshake, sends nothing and records no one")
    func tamperedMessages() {
        let pending = PendingPeers()
        for index in 0..<HandshakeLimits.message2Bytes {
            var run = Self.run(pending: pending)
            run.run(edit2: flipping(index))
            #expect(run.initiatorResult.failure != nil && run.initiatorResult.sent.isEmpty)
            #expect(run.initiatorResult.session == nil)
        }
        for index in 0..<HandshakeLimits.message3Bytes {
            var run = Self.run(pending: pending)
            run.run(edit3: flipping(index))
            #expect(run.responderResult.failure == .handshakeDecryptionFailed)
            #expect(run.responderResult.session == nil)
        }
        #expect(pending.all.isEmpty)
    }

    @Test("Msg1 with a wrong magic, version or network tag is refused silently")
    func badMessage1() {
        let cases: [(Int, CryptoError)] = [
            (0, .handshakeMalformed), (5, .handshakeVersionUnsupported(0)), (6, .handshakeNetworkMismatch),
            (20, .handshakeNetworkMismatch), (71, .handshakeNetworkMismatch),
        ]
        for (index, error) in cases {
            var run = Self.run()
            run.run(edit1: flipping(index))
            #expect(run.responderResult.failure == error)
            #expect(run.responderResult.sent.isEmpty)
        }
    }

    @Test("nodes with different network keys never get past Msg1")
    func networkKeyMismatch() {
        var run = HandshakeRun(
            initiator: Fixture.configuration(Fixture.alice, allowing: [Fixture.bob], networkKey: NetworkKey(bytes: Fixture.filled(7))!),
            responder: Fixture.configuration(Fixture.bob, allowing: [Fixture.alice]))
        run.run()
        #expect(run.responderResult.failure == .handshakeNetworkMismatch)
    }

    @Test("a handshake cut short by the end of the stream fails as truncated")
    func truncated() {
        var run = Self.run()
        let message1 = ActionSummary(run.initiator.start()).sent
        #expect(run.responder.receive(message1.prefix(40), now: .zero).isEmpty)
        #expect(ActionSummary(run.responder.receiveEnd()).failure == .handshakeTruncated)
        var other = Self.run()
        other.run(edit2: { m, _ in Array(m.prefix(100)) })
        #expect(other.initiatorResult.failure == nil && other.initiatorResult.session == nil)
        #expect(ActionSummary(other.initiator.receiveEnd()).failure == .handshakeTruncated)
    }

    @Test("a stalled handshake fails at the deadline and not a moment before")
    func deadline() {
        var run = Self.run()
        _ = run.initiator.start()
        let justBefore = Duration.seconds(WireLimits.handshakeTimeoutSeconds) - .nanoseconds(1)
        #expect(run.initiator.tick(now: justBefore).isEmpty)
        #expect(run.responder.tick(now: justBefore).isEmpty)
        let deadline = Duration.seconds(WireLimits.handshakeTimeoutSeconds)
        #expect(ActionSummary(run.initiator.tick(now: deadline)).failure == .handshakeTimedOut)
        #expect(ActionSummary(run.responder.receive([0x43], now: deadline)).failure == .handshakeTimedOut)
    }

    @Test("bytes from the peer when it is our turn to speak are a violation")
    func unexpectedBytes() {
        var run = Self.run()
        let message1 = ActionSummary(run.initiator.start()).sent
        #expect(ActionSummary(run.responder.receive(message1 + [0], now: .zero)).failure == .handshakeUnexpectedBytes)
        var other = Self.run()
        other.run(edit2: { m, _ in m + [0] })
        #expect(other.initiatorResult.failure == .handshakeUnexpectedBytes)
    }

    @Test("a failed handshake keeps refusing, even when valid bytes follow")
    func failureIsFinal() {
        var run = Self.run()
        run.run(edit3: flipping(0))
        #expect(run.responderResult.failure == .handshakeDecryptionFailed)
        let again = ActionSummary(run.responder.receive(run.message3, now: .seconds(1)))
        #expect(again.failure == .handshakeDecryptionFailed && again.session == nil && again.sent.isEmpty)
    }

    @Test("bytes after Msg3 are handed to the channel as leftover")
    func leftover() throws {
        var run = Self.run()
        run.run(edit3: { m, _ in m + [1, 2, 3] })
        #expect(try #require(run.responderResult.session).leftover == [1, 2, 3])
    }
}
