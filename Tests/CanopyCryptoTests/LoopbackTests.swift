import Testing
@testable import CanopyCrypto

@Suite("Handshake and channel over loopback TCP")
struct LoopbackTests {
    /// Feeds what the socket yields to a handshake machine until it acts.
    static func pump(_ socket: LoopbackSocket, into receive: ([UInt8]) -> [HandshakeAction]) -> ActionSummary {
        while true {
            let bytes = socket.read()
            let actions = receive(bytes)
            if !actions.isEmpty || bytes.isEmpty { return ActionSummary(actions) }
        }
    }

    @Test("initiator and responder handshake over real sockets, then exchange frames both ways and close")
    func fullConnection() throws {
        let (client, server) = LoopbackSocket.pair()
        defer { client.close(); server.close() }
        var initiatorRandom = SystemEntropy()
        var responderRandom = SystemEntropy()
        var initiator = HandshakeInitiator(
            configuration: Fixture.configuration(Fixture.alice, allowing: [Fixture.bob]), now: .zero, random: &initiatorRandom)
        var responder = HandshakeResponder(
            configuration: Fixture.configuration(Fixture.bob, allowing: [Fixture.alice], address: "127.0.0.1"),
            now: .zero, random: &responderRandom)

        client.write(ActionSummary(initiator.start()).sent)
        let afterMessage1 = Self.pump(server) { responder.receive($0, now: .seconds(1)) }
        server.write(afterMessage1.sent)
        let afterMessage2 = Self.pump(client) { initiator.receive($0, now: .seconds(1)) }
        var aliceChannel = SecureChannel(session: try #require(afterMessage2.session), random: &initiatorRandom)
        // The initiator coalesces Msg3, its stream header and its first frame into one write.
        client.write(afterMessage2.sent + (try aliceChannel.seal(Array("hello from alice".utf8))))
        let afterMessage3 = Self.pump(server) { responder.receive($0, now: .seconds(1)) }
        let bobSession = try #require(afterMessage3.session)
        #expect(bobSession.peer == Fixture.alice.nodeID)
        var bobChannel = SecureChannel(session: bobSession, random: &responderRandom)

        var bobEvents = try bobChannel.receive([])
        while bobEvents.isEmpty { bobEvents = try bobChannel.receive(server.read()) }
        #expect(bobEvents == [.message(Array("hello from alice".utf8))])

        let payload = (0..<200_000).map { UInt8($0 % 251) }
        server.write(try bobChannel.seal(payload) + bobChannel.seal([], final: true))
        server.shutdownWrite()
        var aliceEvents: [ChannelEvent] = []
        while true {
            let bytes = client.read()
            if bytes.isEmpty { break }
            aliceEvents += try aliceChannel.receive(bytes)
        }
        try aliceChannel.receiveEnd()
        #expect(aliceEvents == [.message(payload), .finished])
    }

    @Test("a responder that refuses an unknown peer closes, and the initiator sees the stream end")
    func refusedOverSockets() throws {
        let (client, server) = LoopbackSocket.pair()
        defer { client.close(); server.close() }
        let pending = PendingPeers()
        var random = Fixture.entropy(1)
        var initiator = HandshakeInitiator(
            configuration: Fixture.configuration(Fixture.mallory, allowing: [Fixture.bob]), now: .zero, random: &random)
        var responder = HandshakeResponder(
            configuration: Fixture.configuration(Fixture.bob, allowing: [Fixture.alice], pending: pending, address: "127.0.0.1:1"),
            now: .zero, random: &random)
        client.write(ActionSummary(initiator.start()).sent)
        server.write(Self.pump(server) { responder.receive($0, now: .seconds(2)) }.sent)
        let established = Self.pump(client) { initiator.receive($0, now: .seconds(2)) }
        client.write(established.sent)
        let refused = Self.pump(server) { responder.receive($0, now: .seconds(2)) }
        #expect(refused.failure == .peerNotAuthorized(Fixture.mallory.nodeID))
        #expect(refused.sent.isEmpty)
        server.shutdownWrite()
        var channel = SecureChannel(session: try #require(established.session), random: &random)
        #expect(try channel.receive(client.read()) == [])
        #expect(throws: CryptoError.channelEndedWithoutFinal) { try channel.receiveEnd() }
        #expect(pending.all.map(\.address) == ["127.0.0.1:1"])
    }
}
