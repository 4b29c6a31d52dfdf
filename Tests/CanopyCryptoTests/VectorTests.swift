import CanopyWire
import Foundation
import Testing
@testable import CanopyCrypto

/// Checks `Protocol/vectors/node-ids.json` and `Protocol/vectors/handshake.json` against the code.
/// The vectors are the normative examples of Protocol/replication-v1.md §3–§5; another
/// implementation can test itself against the same files.
///
/// To regenerate after a deliberate protocol change, run with `CANOPY_WRITE_VECTORS=1`; the
/// diff then shows exactly what changed on the wire.
@Suite("Crypto test vectors")
struct VectorTests {
    static let directory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Protocol/vectors")

    static func load(_ name: String, expected: [String: Any]) throws -> [String: Any] {
        let url = directory.appendingPathComponent(name)
        if ProcessInfo.processInfo.environment["CANOPY_WRITE_VECTORS"] == "1" {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let data = try JSONSerialization.data(withJSONObject: expected, options: [.prettyPrinted, .sortedKeys])
            try (data + Data("\n".utf8)).write(to: url)
        }
        let object = try JSONSerialization.jsonObject(with: Data(contentsOf: url))
        return try #require(object as? [String: Any])
    }

    // MARK: Node ids

    static let nodeIDKeys: [[UInt8]] = [
        [UInt8](repeating: 0, count: 32), [UInt8](repeating: 0xFF, count: 32), Array(0..<32),
        Fixture.alice.nodeID.publicKey, Fixture.bob.nodeID.publicKey,
        // The key behind Syncthing's documented example id, so both agree on check characters.
        try! NodeID(parsing: NodeIDTests.syncthingExample).publicKey,
    ]

    static let invalidNodeIDs: [(text: String, error: String)] = {
        let good = Fixture.alice.nodeID.description
        var wrongCheck = Array(good)
        wrongCheck[14] = wrongCheck[14] == "A" ? "B" : "A"  // a data character of group 1
        return [
            (String(wrongCheck), "wrongCheckCharacter"),
            (String(good.dropLast()), "wrongLength"),
            (good + "A", "wrongLength"),
            ("0" + good.dropFirst(), "invalidCharacter"),
            (nonCanonical(), "notCanonical"),
        ]
    }()

    /// A text with valid check characters whose last data character has a padding bit set.
    static func nonCanonical() -> String {
        var digits = NodeID.encodeBase32(Fixture.alice.nodeID.publicKey)
        digits[51] |= 1
        let groups = (0..<4).map { group -> [UInt8] in
            let data = Array(digits[group * 13..<(group + 1) * 13])
            return data + [NodeID.luhnCheck(data)]
        }
        return String(decoding: groups.joined().map { NodeID.alphabet[Int($0)] }, as: UTF8.self)
    }

    static func errorName(_ error: CryptoError) -> String {
        switch error {
        case .nodeIDWrongLength: "wrongLength"
        case .nodeIDInvalidCharacter: "invalidCharacter"
        case .nodeIDWrongCheckCharacter: "wrongCheckCharacter"
        case .nodeIDNotCanonical: "notCanonical"
        default: "other"
        }
    }

    @Test("node id vectors: every key prints as listed and every invalid text fails as listed")
    func nodeIDs() throws {
        let invalid = Self.invalidNodeIDs.map { vector -> [String: String] in
            let error = Result { try NodeID(parsing: vector.text) }
            guard case .failure(let failure as CryptoError) = error else { return ["text": vector.text, "error": "accepted"] }
            return ["text": vector.text, "error": Self.errorName(failure)]
        }
        let expected: [String: Any] = [
            "description": "Node ids (Protocol/replication-v1.md §3): publicKey is the Ed25519 public key in hex; nodeID its printed form. Invalid texts must be refused with the named error.",
            "valid": Self.nodeIDKeys.map { ["publicKey": hexString($0), "nodeID": NodeID(publicKey: $0)!.description] },
            "invalid": invalid,
        ]
        let file = try Self.load("node-ids.json", expected: expected)
        for vector in try #require(file["valid"] as? [[String: String]]) {
            let key = hexBytes(try #require(vector["publicKey"]))
            let text = try #require(vector["nodeID"])
            #expect(NodeID(publicKey: key)?.description == text)
            #expect(try NodeID(parsing: text).publicKey == key)
        }
        for vector in try #require(file["invalid"] as? [[String: String]]) {
            let text = try #require(vector["text"])
            let outcome = Result { try NodeID(parsing: text) }
            guard case .failure(let failure as CryptoError) = outcome else {
                Issue.record("accepted invalid node id \(text)")
                continue
            }
            #expect(Self.errorName(failure) == vector["error"], "for \(text)")
        }
    }

    // MARK: Handshake

    /// The fixed inputs of the handshake vector.
    static let inputs: [String: [UInt8]] = [
        "initiatorIdentitySeed": Fixture.filled(0xA1), "responderIdentitySeed": Fixture.filled(0xB0),
        "initiatorEntropySeed": Fixture.filled(1), "responderEntropySeed": Fixture.filled(2),
        "initiatorChannelEntropySeed": Fixture.filled(11), "responderChannelEntropySeed": Fixture.filled(12),
    ]

    /// Runs the handshake and the first frame each way from `inputs`; returns every value as hex.
    static func computeHandshake() throws -> [String: String] {
        var run = HandshakeRun(
            initiator: Fixture.configuration(Fixture.alice, allowing: [Fixture.bob]),
            responder: Fixture.configuration(Fixture.bob, allowing: [Fixture.alice]))
        run.run()
        let initiator = try #require(run.initiatorResult.session)
        let responder = try #require(run.responderResult.session)
        var initiatorRandom = DeterministicEntropy(seed: inputs["initiatorChannelEntropySeed"]!)
        var responderRandom = DeterministicEntropy(seed: inputs["responderChannelEntropySeed"]!)
        var alice = SecureChannel(session: initiator, random: &initiatorRandom)
        var bob = SecureChannel(session: responder, random: &responderRandom)
        var values = inputs.mapValues { hexString($0) }
        values["networkKey"] = hexString(NetworkKey.open.bytes)
        values["initiatorEphemeralSecret"] = hexString(HandshakeForgery.firstEphemeralSecret(entropy: 1))
        values["responderEphemeralSecret"] = hexString(HandshakeForgery.firstEphemeralSecret(entropy: 2))
        values["message1"] = hexString(run.message1)
        values["message2"] = hexString(run.message2)
        values["message3"] = hexString(run.message3)
        values["transcriptHash"] = hexString(initiator.transcriptHash)
        values["initiatorToResponderKeyBlake2b"] = hexString(Sodium.blake2b([initiator.sendKey[...]]))
        values["responderToInitiatorKeyBlake2b"] = hexString(Sodium.blake2b([responder.sendKey[...]]))
        values["firstFramePlaintext"] = hexString(Array("hello".utf8))
        values["initiatorFirstOutput"] = hexString(try alice.seal(Array("hello".utf8)))
        values["responderFirstOutput"] = hexString(try bob.seal(Array("hello".utf8)))
        return values
    }

    @Test("the handshake vector: fixed keys and entropy reproduce every message, the keys and the first frames")
    func handshake() throws {
        let computed = try Self.computeHandshake()
        var expected: [String: Any] = computed
        expected["description"] = "Full handshake (Protocol/replication-v1.md §4-§5) between identities derived from the given seeds. DeterministicEntropy(seed) draws each ephemeral secret; the channel seeds draw each side's 24-byte secretstream header. Keys appear only as BLAKE2b-256 digests. The first outputs are stream header || first frame sealing firstFramePlaintext."
        let file = try Self.load("handshake.json", expected: expected)
        for (name, value) in computed {
            #expect(file[name] as? String == value, "\(name)")
        }
        // The listed frames must also open with the listed transcript's keys on the other side.
        var run = HandshakeRun(
            initiator: Fixture.configuration(Fixture.alice, allowing: [Fixture.bob]),
            responder: Fixture.configuration(Fixture.bob, allowing: [Fixture.alice]))
        run.run()
        var random = Fixture.entropy(0)
        var bob = SecureChannel(session: try #require(run.responderResult.session), random: &random)
        let frame = hexBytes(try #require(file["initiatorFirstOutput"] as? String))
        #expect(try bob.receive(frame) == [.message(Array("hello".utf8))])
    }
}
