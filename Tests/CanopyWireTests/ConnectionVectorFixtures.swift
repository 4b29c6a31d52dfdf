import CanopyCore
@testable import CanopyWire

/// The messages and byte strings behind `Protocol/vectors/messages-v2.json` and the example
/// exchange of `Protocol/replication-v2.md` §9 (regenerated with `CANOPY_WRITE_VECTORS=1`, as
/// `VectorFixtures`).
enum ConnectionVectorFixtures {
    static let nodeA = VectorFixtures.databaseA
    static let nodeB = VectorFixtures.databaseB

    static func name(_ text: String) -> DatabaseName { DatabaseName(validating: text)! }

    /// The example exchange of the spec's §9, in order, with who sends each message.
    static let exampleExchange: [(sender: String, name: String, message: ConnectionMessage)] = {
        let v1 = Dictionary(uniqueKeysWithValues: VectorFixtures.exampleExchange.map { ($0.name, $0.message) })
        return [
            ("A", "example-hello-a", .hello(ConnectionHello(nodeID: nodeA))),
            ("B", "example-hello-b", .hello(ConnectionHello(nodeID: nodeB))),
            ("A", "example-attach-notes", .attach(Attach(channel: 1, database: name("notes")))),
            ("A", "example-attach-photos", .attach(Attach(channel: 3, database: name("photos")))),
            ("B", "example-accept-notes", .attach(Attach(channel: 1, database: name("notes")))),
            ("B", "example-refuse-photos", .detach(Detach(channel: 3, code: .forbidden, message: "photos is not shared with you"))),
            ("A", "example-answer-refusal", .detach(Detach(channel: 3, code: .normal, message: ""))),
            ("A", "example-channel-hello-a", .channel(1, v1["example-hello-a"]!)),
            ("B", "example-channel-hello-b", .channel(1, v1["example-hello-b"]!)),
            ("B", "example-channel-checkpoint-get", .channel(1, v1["example-checkpoint-get"]!)),
            ("A", "example-channel-checkpoint-none", .channel(1, v1["example-checkpoint-none"]!)),
            ("B", "example-channel-close", .channel(1, v1["example-close"]!)),
            ("B", "example-detach-notes", .detach(Detach(channel: 1, code: .normal, message: ""))),
            ("A", "example-answer-detach", .detach(Detach(channel: 1, code: .normal, message: ""))),
            ("A", "example-close", .close(Close(code: .normal, reason: "done"))),
        ]
    }()

    /// Further valid messages: every field at its bounds.
    static let otherMessages: [(name: String, message: ConnectionMessage)] = [
        ("hello-version-1", .hello(ConnectionHello(hello: Hello(version: 1, databaseID: nodeA, revsLimit: 1000, window: 4)))),
        ("hello-future-version-features", .hello(ConnectionHello(version: 3, features: 0x8000_0000_0000_0001, nodeID: nodeB,
                                                                 channelsMax: 1))),
        ("heartbeat", .heartbeat),
        ("heartbeat-echo", .heartbeatEcho),
        ("error-report", .error(ErrorMessage(requestID: 0, code: .busy, message: "slow disk"))),
        ("attach-longest-name", .attach(Attach(channel: UInt64.max, database: name("a" + String(repeating: "z", count: 237))))),
        ("attach-every-character", .attach(Attach(channel: 2, database: name("a0123456789_$()+-/bcdefghijklmnopqrstuvwxyz")))),
        ("detach-conflict", .detach(Detach(channel: 2, code: .conflict,
                                           message: "crossing attach of notes: channel 1 of the initiator is kept"))),
        ("detach-code-ffff", .detach(Detach(channel: 128, code: ErrorCode(rawValue: 0xFFFF), message: "é"))),
        ("channel-heartbeat", .channel(300, .heartbeat)),
        ("channel-changes", .channel(2, VectorFixtures.exampleExchange[5].message)),
    ]

    static var validMessages: [(name: String, message: ConnectionMessage)] {
        exampleExchange.map { ($0.name, $0.message) } + otherMessages
    }

    /// Byte strings a version-2 decoder must refuse, with the code it must report.
    static let invalidMessages: [(name: String, bytes: [UInt8], code: ErrorCode)] = [
        ("hello-version-0", [0x01, 0x00], .unsupportedVersion),
        ("hello-channels-max-10001", [0x01, 0x02, 0x00] + nodeA + [0x91, 0x4E, 0x01], .limitExceeded),
        ("hello-channels-max-0", [0x01, 0x02, 0x00] + nodeA + [0x00, 0x01], .limitExceeded),
        ("hello-window-17", [0x01, 0x02, 0x00] + nodeA + [0x01, 0x11], .limitExceeded),
        ("subscribe-outside-channel", VectorFixtures.exampleExchange[4].message.encoded(), .unexpectedMessage),
        ("unknown-type-13", [0x13, 0x01], .unknownMessageType),
        ("attach-channel-0", [0x10, 0x00, 0x01, 0x61], .malformedMessage),
        ("attach-empty-name", [0x10, 0x01, 0x00], .limitExceeded),
        ("attach-name-239-bytes", [0x10, 0x01, 0xEF, 0x01] + [UInt8](repeating: 0x61, count: 239), .limitExceeded),
        ("attach-name-uppercase", [0x10, 0x01, 0x05] + Array("Notes".utf8), .malformedMessage),
        ("attach-name-digit-first", [0x10, 0x01, 0x05] + Array("1note".utf8), .malformedMessage),
        ("attach-name-dot", [0x10, 0x01, 0x05] + Array("a.txt".utf8), .malformedMessage),
        ("attach-name-not-utf8", [0x10, 0x01, 0x02, 0x61, 0xC0], .malformedMessage),
        ("attach-trailing-byte", [0x10, 0x01, 0x01, 0x61, 0x00], .malformedMessage),
        ("detach-code-above-u16", [0x11, 0x01, 0x80, 0x80, 0x04, 0x00], .malformedMessage),
        ("detach-truncated", [0x11, 0x01, 0x00], .malformedMessage),
        ("channel-empty", [0x12, 0x01], .malformedMessage),
        ("channel-nested-attach", [0x12, 0x01, 0x10, 0x01, 0x01, 0x61], .unknownMessageType),
        ("channel-inner-invalid", [0x12, 0x01, 0x03, 0x00], .malformedMessage),
        ("channel-inner-trailing", [0x12, 0x01, 0x0C, 0x00], .malformedMessage),
    ]
}
