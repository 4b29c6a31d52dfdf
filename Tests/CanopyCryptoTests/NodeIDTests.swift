import Testing
@testable import CanopyCrypto

@Suite("Node ids")
struct NodeIDTests {
    /// The example device id in Syncthing's documentation (dev/device-ids.rst): its check
    /// characters were computed by Syncthing, so accepting it checks our Luhn against theirs.
    static let syncthingExample = "MFZWI3D-BONSGYC-YLTMRWG-C43ENR5-QXGZDMM-FZWI3DP-BONSGYY-LTMRWAD"

    @Test("Syncthing's published device id parses and prints back unchanged")
    func syncthingExampleRoundTrips() throws {
        let id = try NodeID(parsing: Self.syncthingExample)
        #expect(id.description == Self.syncthingExample)
        #expect(id.compactText.count == NodeID.compactCharacters)
    }

    @Test("a node id prints in eight dash-separated groups of seven and parses back")
    func roundTrip() throws {
        let id = Fixture.alice.nodeID
        let text = id.description
        #expect(text.split(separator: "-").map(\.count) == Array(repeating: 7, count: 8))
        #expect(try NodeID(parsing: text) == id)
    }

    @Test("parsing ignores case, dashes and spaces")
    func lenientInput() throws {
        let id = Fixture.bob.nodeID
        let compact = id.compactText
        #expect(try NodeID(parsing: compact.lowercased()) == id)
        let spaced = stride(from: 0, to: 56, by: 4).map { i in
            String(Array(compact)[i..<i + 4])
        }.joined(separator: " - ")
        #expect(try NodeID(parsing: spaced) == id)
    }

    @Test("every single-character typo is caught by a check character or the canonical-form rule")
    func typosAreRejected() throws {
        let compact = Array(Fixture.alice.nodeID.compactText)
        for position in compact.indices {
            var typo = compact
            typo[position] = typo[position] == "A" ? "B" : "A"
            #expect(throws: CryptoError.self) { try NodeID(parsing: String(typo)) }
        }
    }

    @Test("a wrong check character names its group")
    func wrongCheckCharacter() {
        var compact = Array(Fixture.alice.nodeID.compactText)
        compact[27] = compact[27] == "A" ? "B" : "A"  // the second group's check character
        #expect(throws: CryptoError.nodeIDWrongCheckCharacter(group: 1)) {
            try NodeID(parsing: String(compact))
        }
    }

    @Test("wrong lengths and foreign characters are rejected with a clear error")
    func malformed() {
        let compact = Fixture.alice.nodeID.compactText
        #expect(throws: CryptoError.nodeIDWrongLength(55)) { try NodeID(parsing: String(compact.dropLast())) }
        #expect(throws: CryptoError.nodeIDWrongLength(57)) { try NodeID(parsing: compact + "A") }
        #expect(throws: CryptoError.nodeIDWrongLength(0)) { try NodeID(parsing: "") }
        #expect(throws: CryptoError.nodeIDInvalidCharacter("1")) { try NodeID(parsing: "1" + compact.dropFirst()) }
        #expect(throws: CryptoError.nodeIDInvalidCharacter("é")) { try NodeID(parsing: "é" + compact.dropFirst()) }
    }

    @Test("node ids order byte-wise by public key")
    func ordering() {
        let low = NodeID(publicKey: [UInt8](repeating: 0, count: 31) + [1])!
        let high = NodeID(publicKey: [1] + [UInt8](repeating: 0, count: 31))!
        #expect(low < high)
        #expect(NodeID(publicKey: [1, 2, 3]) == nil)
    }
}
