import CanopyCore
import CanopySimulation
import CanopyWire
import Testing
@testable import CanopyReplication

/// `ChannelMux` over an in-memory connection (`Protocol/replication-v2.md`): channels open, carry
/// their own messages, are refused, cross, detach and close with the connection; a peer that
/// breaks the rules is closed with the right code.
@Suite("Channel multiplexing (protocol version 2)")
struct ChannelMuxTests {
    static let subscribe = Message.subscribe(Subscribe(requestID: 1, replicationID: [1], since: 0, continuous: false, filter: .none))

    @Test("two databases open at once on one connection and each channel receives only its own messages")
    func twoDatabases() throws {
        let pair = MuxPair()
        pair.openFromA("notes", "photos")
        #expect(pair.b.asked == [database("notes"), database("photos")])
        let notesA = try #require(pair.a.channel("notes"))
        let photosA = try #require(pair.a.channel("photos"))
        let notesB = try #require(pair.b.channel("notes"))
        let photosB = try #require(pair.b.channel("photos"))
        #expect(notesA.id == 1 && photosA.id == 3 && notesB.id == 1 && photosB.id == 3)

        notesA.send(.heartbeat)
        photosA.send(Self.subscribe)
        notesB.send(.error(ErrorMessage(requestID: 0, code: .busy, message: "notes")))
        photosB.send(.heartbeatEcho)
        pair.settle()
        #expect(pair.b.messages("notes") == [.heartbeat])
        #expect(pair.b.messages("photos") == [Self.subscribe])
        #expect(pair.a.messages("notes") == [.error(ErrorMessage(requestID: 0, code: .busy, message: "notes"))])
        #expect(pair.a.messages("photos") == [.heartbeatEcho])
        #expect(pair.openChannels == [1: database("notes"), 3: database("photos")])
    }

    @Test("the responder opens even ids, and an open waits for the peer's hello")
    func responderIDs() throws {
        let pair = MuxPair()
        pair.b.open("notes")
        pair.b.open("logs")
        pair.settle()
        #expect(pair.b.channel("notes")?.id == 2 && pair.b.channel("logs")?.id == 4)
        #expect(pair.a.channel("notes")?.id == 2)
    }

    @Test("the peer's attach refused with a code and a message reaches the requester, and the id dies on both sides")
    func refusal() throws {
        let pair = MuxPair()
        pair.b.refusals[database("photos")] = (.forbidden, "database photos is not shared with you")
        pair.openFromA("notes", "photos")
        let refusal = try #require(pair.a.refusal("photos"))
        #expect(refusal.code == .forbidden && refusal.message == "database photos is not shared with you")
        #expect(pair.a.channel("photos") == nil && pair.b.channel("photos") == nil)
        #expect(pair.openChannels == [1: database("notes")])
        // The requester may ask again once the refused id is dead on both sides.
        pair.b.refusals = [:]
        pair.openFromA("photos")
        #expect(pair.a.channel("photos")?.id == 5)
        #expect(pair.isUp)
    }

    @Test("crossing attaches for one database resolve to the initiator's channel on both sides")
    func crossing() throws {
        let pair = MuxPair()
        pair.a.open("notes")
        pair.b.open("notes")
        pair.settle()
        let onA = try #require(pair.a.channel("notes"))
        let onB = try #require(pair.b.channel("notes"))
        #expect(onA.id == 1 && onB.id == 1)
        #expect(pair.a.asked.isEmpty && pair.b.asked.isEmpty, "neither application is asked: both want the database")
        #expect(pair.openChannels == [1: database("notes")])
        onB.send(.heartbeat)
        onA.send(.heartbeatEcho)
        pair.settle()
        #expect(pair.a.messages("notes") == [.heartbeat] && pair.b.messages("notes") == [.heartbeatEcho])
        #expect(pair.b.mux.openChannels.count == 1, "the responder's superseded id is dead")
        #expect(pair.isUp)
    }

    @Test("detaching one channel closes it on both sides while the other goes on; messages in flight are discarded")
    func detachOne() throws {
        let pair = MuxPair()
        pair.openFromA("notes", "photos")
        let notesA = try #require(pair.a.channel("notes"))
        let photosB = try #require(pair.b.channel("photos"))
        let notesB = try #require(pair.b.channel("notes"))
        // B's message crosses A's detach: A discards it instead of failing the connection.
        notesB.send(.heartbeat)
        notesA.close(.localClosed)
        photosB.send(Self.subscribe)
        pair.settle()
        #expect(pair.a.closeReason("notes") == .localClosed)
        #expect(pair.b.closeReason("notes") == .peerClosed)
        #expect(pair.a.messages("notes").isEmpty)
        #expect(pair.a.messages("photos") == [Self.subscribe])
        #expect(pair.openChannels == [3: database("photos")])
        #expect(pair.isUp)
        // A channel detached with a reason reaches the peer's session as a failure naming it.
        pair.b.channel("photos")?.detach(code: .forbidden, message: "no longer shared")
        pair.settle()
        #expect(pair.a.closeReason("photos") == .failed("detached: forbidden no longer shared"))
        #expect(pair.openChannels == [:])
    }

    @Test("the connection closing closes every channel on both sides, and a pending open learns that the connection ended")
    func connectionCloses() throws {
        let pair = MuxPair()
        pair.openFromA("notes", "photos")
        pair.b.mux.close(code: .goingAway, reason: "stopping")
        pair.a.open("logs")
        pair.settle()
        #expect(pair.b.closeReason("notes") == .localClosed && pair.b.closeReason("photos") == .localClosed)
        #expect(pair.a.closeReason("notes") == .peerClosed && pair.a.closeReason("photos") == .peerClosed)
        #expect(pair.a.connectionEnded("logs") == "the peer closed the connection")
        #expect(pair.a.connectionClosed == .peerClosed && pair.b.connectionClosed == .localClosed)
        // A channel of a closed connection sends nothing and stays closed.
        pair.a.channel("notes")?.send(.heartbeat)
        pair.settle()
        #expect(pair.b.messages("notes").isEmpty)
    }

    @Test("closing the connection from a channel's callback ends it at once: later channels and requests learn it")
    func closeFromCallback() {
        let pair = MuxPair()
        let mux = pair.a.mux!
        pair.a.serve = { _ in mux.close(code: .goingAway, reason: "stopping") }
        pair.openFromA("notes", "photos")
        #expect(pair.a.mux.isClosed && pair.b.mux.isClosed)
        #expect(pair.a.connectionEnded("photos") == "the connection closed")
        #expect(pair.b.closeReason("notes") == .peerClosed)
    }

    @Test("a connection without channels stays up on heartbeats; a silent peer is closed with timeout")
    func heartbeats() {
        let pair = MuxPair()
        pair.scheduler.advance(by: 120)
        #expect(pair.isUp)
        let peer = MuxScript()
        peer.sayHello()
        peer.scheduler.advance(by: 60)
        let sent = peer.peer.take()
        #expect(MuxScript.close(in: sent)?.code == .timeout)
        #expect(sent.contains(.heartbeat))
        #expect(peer.side.mux.isClosed)
    }
}

/// A mux facing a peer that breaks the rules of version 2.
@Suite("Channel multiplexing: a peer that breaks the rules")
struct ChannelMuxViolationTests {
    @Test("a channel message for an id never opened, or dead, closes the connection with invalidReference")
    func unknownChannel() throws {
        let script = MuxScript()
        script.sayHello()
        var sent = script.send(.channel(5, .heartbeat))
        #expect(MuxScript.close(in: sent)?.code == .invalidReference)
        #expect(script.side.mux.isClosed)

        let dead = MuxScript()
        dead.sayHello()
        dead.side.open("notes")
        dead.send(.attach(Attach(channel: 1, database: database("notes"))))
        try #require(dead.side.channel("notes") != nil)
        sent = dead.send(.detach(Detach(channel: 1, code: .normal, message: "")), .channel(1, .heartbeat))
        #expect(sent.contains(.detach(Detach(channel: 1, code: .normal, message: ""))), "the peer's detach is answered")
        #expect(MuxScript.close(in: sent)?.code == .invalidReference)
    }

    @Test("messages the peer sent before seeing our detach are discarded, and its answer ends the id")
    func inFlightAfterDetach() throws {
        let script = MuxScript()
        script.sayHello()
        script.send(.attach(Attach(channel: 2, database: database("notes"))))
        let channel = try #require(script.side.channel("notes"))
        script.peer.take()
        channel.close(.localClosed)
        let sent = script.send(.channel(2, .heartbeat), .channel(2, .heartbeatEcho), .detach(Detach(channel: 2, code: .normal, message: "")))
        #expect(sent == [.detach(Detach(channel: 2, code: .normal, message: ""))])
        #expect(!script.side.mux.isClosed)
        #expect(script.side.messages("notes").isEmpty)
        // Now the id is dead: anything more for it is a violation.
        #expect(MuxScript.close(in: script.send(.channel(2, .heartbeat)))?.code == .invalidReference)
    }

    @Test("a peer attaching more than channelsMax is refused with busy, and the connection goes on")
    func channelLimit() {
        let script = MuxScript(channelsMax: 2)
        script.sayHello()
        let sent = script.send(.attach(Attach(channel: 2, database: database("a"))), .attach(Attach(channel: 4, database: database("b"))),
                               .attach(Attach(channel: 6, database: database("c"))))
        #expect(sent.count == 3)
        #expect(sent[0] == .attach(Attach(channel: 2, database: database("a"))))
        #expect(sent[1] == .attach(Attach(channel: 4, database: database("b"))))
        guard case .detach(let refusal) = sent[2] else { Issue.record("third attach not refused: \(sent)"); return }
        #expect(refusal.channel == 6 && refusal.code == .busy)
        #expect(script.side.asked == [database("a"), database("b")])
        #expect(!script.side.mux.isClosed)
        // A peer that ignores refusals is cut off once it holds twice the limit.
        let flood = script.send(.attach(Attach(channel: 8, database: database("d"))), .attach(Attach(channel: 10, database: database("e"))))
        #expect(MuxScript.close(in: flood)?.code == .windowExceeded)
    }

    @Test("an open beyond the peer's announced channelsMax is refused locally with busy")
    func localLimit() {
        let script = MuxScript()
        script.sayHello(ConnectionHello(nodeID: [UInt8](repeating: 0xB, count: 16), channelsMax: 1))
        script.side.open("a")
        script.side.open("b")
        script.settle()
        #expect(script.side.refusal("b")?.code == .busy)
        #expect(script.peer.take() == [.attach(Attach(channel: 1, database: database("a")))])
    }

    @Test("an invalid database name is fatal: malformedMessage, or limitExceeded for its length",
          arguments: [("Notes", ErrorCode.malformedMessage), ("1st", .malformedMessage), ("a.b", .malformedMessage),
                      (String(repeating: "a", count: 239), .limitExceeded)])
    func invalidName(name: String, code: ErrorCode) {
        let script = MuxScript()
        script.sayHello()
        var writer = ByteWriter()
        writer.writeByte(ConnectionMessageType.attach.rawValue)
        writer.writeVarint(2)
        writer.writeString(name, maxBytes: 1000)
        script.peer.inject(writer.bytes)
        script.settle()
        #expect(MuxScript.close(in: script.peer.take())?.code == code)
        #expect(script.side.mux.isClosed && script.side.asked.isEmpty)
    }

    @Test("attach rules: ids count up with the peer's parity, an echo must match, one channel per database")
    func attachRules() {
        let cases: [(String, [ConnectionMessage])] = [
            ("reused id", [.attach(Attach(channel: 4, database: database("a"))), .attach(Attach(channel: 2, database: database("b")))]),
            ("echo of nothing", [.attach(Attach(channel: 1, database: database("a")))]),
            ("database twice", [.attach(Attach(channel: 2, database: database("a"))), .attach(Attach(channel: 4, database: database("a")))]),
            ("detach of nothing", [.detach(Detach(channel: 7, code: .normal, message: ""))]),
            ("error naming a request", [.error(ErrorMessage(requestID: 3, code: .busy, message: ""))]),
        ]
        for (name, messages) in cases {
            let script = MuxScript()
            script.sayHello()
            let sent = messages.map { script.send($0) }.joined()
            #expect(MuxScript.close(in: Array(sent))?.code == .invalidReference, "\(name)")
        }
    }

    @Test("a version-1 peer is refused with unsupportedVersion and a reason saying it must be upgraded")
    func versionOnePeer() {
        let script = MuxScript()
        script.side.open("notes")
        let close = MuxScript.close(in: script.sayHello(
            ConnectionHello(hello: Hello(version: 1, databaseID: [UInt8](repeating: 0xB, count: 16), revsLimit: 1000, window: 4))))
        #expect(close?.code == .unsupportedVersion)
        #expect(close?.reason.contains("must be upgraded") == true)
        #expect(script.side.connectionEnded("notes")?.hasSuffix("the peer must be upgraded") == true)
        #expect(script.side.mux.isClosed)
    }

    @Test("channel messages before the peer's hello, and session messages outside a channel, are unexpectedMessage")
    func beforeHello() {
        let early = MuxScript()
        #expect(MuxScript.close(in: early.send(.attach(Attach(channel: 2, database: database("a")))))?.code == .unexpectedMessage)
        let outside = MuxScript()
        outside.sayHello()
        outside.peer.inject(ChannelMuxTests.subscribe.encoded())
        outside.settle()
        #expect(MuxScript.close(in: outside.peer.take())?.code == .unexpectedMessage)
    }

    @Test("a node that reaches itself closes with normal")
    func selfConnection() {
        let script = MuxScript()
        #expect(MuxScript.close(in: script.sayHello(ConnectionHello(nodeID: [UInt8](repeating: 0xA, count: 16))))?.code == .normal)
        #expect(script.side.mux.isClosed)
    }
}
