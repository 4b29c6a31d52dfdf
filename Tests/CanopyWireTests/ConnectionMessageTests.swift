import CanopyCore
import Testing
@testable import CanopyWire

/// The messages of a multiplexed connection (`Protocol/replication-v2.md` §2–§3): vectors, round
/// trips, refusals, and database names.
@Suite("Connection messages (protocol version 2)", .serialized)
struct ConnectionMessageTests {
    static let vectorPath = "Protocol/vectors/messages-v2.json"

    @Test("every v2 message vector decodes to its fixture and re-encodes byte for byte; every invalid one fails with its code")
    func vectors() throws {
        if VectorFiles.regenerating { try writeVectors() }
        let file = try VectorFiles.readJSON(Self.vectorPath)
        let valid = try #require(file["valid"] as? [[String: String]])
        let fixtures = Dictionary(uniqueKeysWithValues: ConnectionVectorFixtures.validMessages.map { ($0.name, $0.message) })
        #expect(valid.count == fixtures.count)
        var namesSeen = Set<String>()
        for vector in valid {
            let name = try #require(vector["name"])
            let fixture = try #require(fixtures[name], "vector \(name) has no fixture")
            let bytes = try VectorFiles.bytes(hex: try #require(vector["hex"]))
            #expect(try ConnectionMessage.decode(bytes) == fixture, "\(name)")
            #expect(fixture.encoded() == bytes, "\(name)")
            #expect(vector["type"] == fixture.name)
            namesSeen.insert(fixture.name)
        }
        #expect(namesSeen.isSuperset(of: ConnectionMessageType.allCases.map(\.description)), "every new type has a vector")

        let invalid = try #require(file["invalid"] as? [[String: String]])
        #expect(invalid.count == ConnectionVectorFixtures.invalidMessages.count)
        for vector in invalid {
            let name = try #require(vector["name"])
            let bytes = try VectorFiles.bytes(hex: try #require(vector["hex"]))
            do {
                _ = try ConnectionMessage.decode(bytes)
                Issue.record("invalid vector \(name) decoded")
            } catch {
                #expect(error.code.description == vector["error"], "\(name): \(error)")
            }
        }
    }

    private func writeVectors() throws {
        let valid = ConnectionVectorFixtures.validMessages.map { name, message in
            ["name": name, "type": message.name, "hex": VectorFiles.hex(message.encoded())]
        }
        let invalid = ConnectionVectorFixtures.invalidMessages.map { name, bytes, code in
            ["name": name, "hex": VectorFiles.hex(bytes), "error": code.description]
        }
        try VectorFiles.writeJSON(["valid": valid, "invalid": invalid], to: Self.vectorPath)
    }

    @Test("version 1's decoder keeps refusing attach, detach and channel as unknown types")
    func versionOneRefusesNewTypes() throws {
        for (_, message) in ConnectionVectorFixtures.otherMessages where ConnectionMessageType.allCases.map(\.description).contains(message.name) {
            let bytes = message.encoded()
            #expect(throws: ProtocolError.unknownMessageType(bytes[0])) { try Message.decode(bytes) }
        }
    }

    @Test("random v2 messages survive encode then decode; every proper prefix is refused")
    func roundTripAndPrefixes() throws {
        var generator = RandomMessages(seed: 21)
        var random = SplitMix64(seed: 22)
        for round in 0..<300 {
            let message: ConnectionMessage
            let channel = random.next() % 1000 + 1
            switch round % 4 {
            case 0: message = .channel(channel, generator.message())
            case 1: message = .attach(Attach(channel: channel, database: Self.randomName(&random)))
            case 2: message = .detach(Detach(channel: channel, code: generator.code(), message: generator.text(1024)))
            default: message = .hello(ConnectionHello(version: random.next() % 5 + 1, features: random.next(),
                                                      nodeID: (0..<16).map { _ in UInt8(truncatingIfNeeded: random.next()) },
                                                      channelsMax: Int(random.next() % 1024) + 1))
            }
            let bytes = message.encoded()
            #expect(try ConnectionMessage.decode(bytes) == message, "round \(round)")
            for length in 0..<bytes.count {
                #expect(throws: ProtocolError.self) { try ConnectionMessage.decode(Array(bytes[..<length])) }
            }
        }
    }

    /// A valid name of random length built from the allowed characters.
    static func randomName(_ random: inout SplitMix64) -> DatabaseName {
        let rest = Array("abcdefghijklmnopqrstuvwxyz0123456789_$()+-/".utf8)
        let count = Int(random.next() % 238)
        var bytes = [UInt8(ascii: "a") + UInt8(random.next() % 26)]
        for _ in 0..<count { bytes.append(rest[Int(random.next() % UInt64(rest.count))]) }
        return DatabaseName(validating: String(decoding: bytes, as: UTF8.self))!
    }
}
