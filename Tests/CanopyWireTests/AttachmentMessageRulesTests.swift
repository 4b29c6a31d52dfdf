import CanopyCore
import Testing
@testable import CanopyWire

@Suite("Attachment messages in the state machine")
struct AttachmentMessageRulesTests {
    static func machines(aFeatures: UInt64, bFeatures: UInt64) -> (ConnectionStateMachine, ConnectionStateMachine) {
        var a = ConnectionStateMachine(localHello: Hello(features: aFeatures, databaseID: [UInt8](repeating: 0xA, count: 16), revsLimit: 10, window: 2))
        var b = ConnectionStateMachine(localHello: Hello(features: bFeatures, databaseID: [UInt8](repeating: 0xB, count: 16), revsLimit: 10, window: 2))
        guard case .send(let helloA) = a.start()[0], case .send(let helloB) = b.start()[0] else { fatalError("no hello") }
        _ = b.receive(helloA)
        _ = a.receive(helloB)
        return (a, b)
    }

    static let get = Message.attachmentGet(AttachmentGet(requestID: 3, digest: Array(0..<32), offset: 0, maxBytes: 100))

    @Test("with both sides' attachments feature, a get is delivered and its part answers it; a second part for it is unknownRequest")
    func getAndPart() {
        var (a, b) = Self.machines(aFeatures: Hello.attachmentsFeature, bFeatures: Hello.attachmentsFeature)
        #expect(a.attachmentsAgreed && b.attachmentsAgreed)
        b.send(Self.get)
        #expect(a.receive(Self.get) == [.deliver(Self.get)])
        let part = Message.attachmentPart(AttachmentPart(requestID: 3, length: 100, data: [1, 2, 3]))
        a.send(part)
        #expect(b.receive(part) == [.deliver(part)])
        let again = b.receive(part)
        #expect(again.contains(.closeTransport(code: ProtocolError.unknownRequest(messageType: "", requestID: 0).code)), "\(again)")
    }

    @Test("a get from a peer when this side did not set the feature is unexpectedMessage, and fatal")
    func notAgreed() {
        var (a, _) = Self.machines(aFeatures: 0, bFeatures: Hello.attachmentsFeature)
        #expect(!a.attachmentsAgreed)
        let actions = a.receive(Self.get)
        #expect(actions.contains(.closeTransport(code: .unexpectedMessage)), "\(actions)")
    }

    @Test("a part nobody asked for is refused")
    func unaskedPart() {
        var (a, _) = Self.machines(aFeatures: Hello.attachmentsFeature, bFeatures: Hello.attachmentsFeature)
        let actions = a.receive(.attachmentPart(AttachmentPart(requestID: 9, length: 1, data: [1])))
        #expect(actions.contains { if case .closeTransport = $0 { return true } else { return false } }, "\(actions)")
    }

    @Test("more attachment gets than inFlightRequestsMax at once is windowExceeded")
    func window() {
        var (a, _) = Self.machines(aFeatures: Hello.attachmentsFeature, bFeatures: Hello.attachmentsFeature)
        for id in 1...UInt64(WireLimits.inFlightRequestsMax) {
            let get = Message.attachmentGet(AttachmentGet(requestID: id, digest: Array(0..<32), offset: 0, maxBytes: 1))
            #expect(a.receive(get) == [.deliver(get)])
        }
        let over = Message.attachmentGet(AttachmentGet(requestID: 99, digest: Array(0..<32), offset: 0, maxBytes: 1))
        #expect(a.receive(over).contains(.closeTransport(code: .windowExceeded)))
    }
}
