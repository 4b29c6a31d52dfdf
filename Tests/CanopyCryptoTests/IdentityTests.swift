import Foundation
import Testing
@testable import CanopyCrypto

@Suite("Identities")
struct IdentityTests {
    @Test("a seed gives the Ed25519 public key of RFC 8032 test 1")
    func rfc8032Vector() throws {
        let seed = hexBytes("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
        let identity = try #require(Identity(seed: seed))
        #expect(hexString(identity.nodeID.publicKey) == "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
        #expect(identity.seed == seed)
        // RFC 8032 test 1 signs the empty message.
        #expect(hexString(identity.sign([])) == "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")
    }

    @Test("generate draws the seed from the injected entropy source")
    func generateIsReproducible() {
        var first = Fixture.entropy(5)
        var second = Fixture.entropy(5)
        #expect(Identity.generate(random: &first).nodeID == Identity.generate(random: &second).nodeID)
        var system = SystemEntropy()
        #expect(Identity.generate(random: &system).nodeID != Identity.generate(random: &system).nodeID)
    }

    @Test("the identity file holds the seed as hex and the node id it gives, and reads back to the same identity")
    func fileContentsRoundTrip() throws {
        let contents = Fixture.alice.fileContents()
        let text = String(decoding: contents, as: UTF8.self)
        #expect(text == "canopy-identity-v2 " + String(repeating: "a1", count: 32) + " \(Fixture.alice.nodeID)\n")
        #expect(try Identity(fileContents: contents).nodeID == Fixture.alice.nodeID)
        // The first format, without the node id, is still read.
        let first = "canopy-identity-v1 " + String(repeating: "a1", count: 32) + "\n"
        #expect(try Identity(fileContents: Array(first.utf8)).nodeID == Fixture.alice.nodeID)
    }

    @Test("an identity file with any one hex digit of its seed changed is refused, not read as another node")
    func damagedSeedRefused() {
        let contents = Fixture.alice.fileContents()
        let seedStart = "canopy-identity-v2 ".utf8.count
        for offset in 0..<64 {
            var damaged = contents
            damaged[seedStart + offset] = damaged[seedStart + offset] == UInt8(ascii: "0") ? UInt8(ascii: "1") : UInt8(ascii: "0")
            #expect(throws: CryptoError.self) { try Identity(fileContents: damaged) }
        }
    }

    @Test("malformed identity files are refused", arguments: [
        "", "canopy-identity-v1 00\n",
        "canopy-identity-v2 " + String(repeating: "00", count: 32) + "\n",
        "canopy-identity-v3 " + String(repeating: "00", count: 32) + "\n",
        "canopy-identity-v1 " + String(repeating: "0G", count: 32) + "\n",
        "canopy-identity-v1 " + String(repeating: "AB", count: 32) + "\n",
        "canopy-identity-v1 " + String(repeating: "00", count: 32) + " ",
    ])
    func malformedFiles(text: String) {
        #expect(throws: CryptoError.self) { try Identity(fileContents: Array(text.utf8)) }
    }

    @Test("save writes a 0600 file, refuses to overwrite it, and load reads it back")
    func saveAndLoad() throws {
        let path = NSTemporaryDirectory() + "canopy-identity-\(UUID().uuidString)"
        defer { unlink(path) }
        try Fixture.bob.save(path: path)
        let mode = try #require(FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
        #expect(mode == 0o600)
        #expect(try Identity.load(path: path).nodeID == Fixture.bob.nodeID)
        #expect(throws: CryptoError.identityFileIO(operation: "open", path: path, errno: EEXIST)) {
            try Fixture.alice.save(path: path)
        }
        #expect(try Identity.load(path: path).nodeID == Fixture.bob.nodeID)
    }

    @Test("load refuses an identity file that others can read")
    func loadRefusesWidePermissions() throws {
        let path = NSTemporaryDirectory() + "canopy-identity-\(UUID().uuidString)"
        defer { unlink(path) }
        try Fixture.bob.save(path: path)
        chmod(path, 0o644)
        #expect(throws: CryptoError.identityFilePermissions(path: path, mode: 0o644)) {
            try Identity.load(path: path)
        }
    }

    @Test("deterministic entropy is a pure function of its seed and call sizes")
    func deterministicEntropy() {
        var first = Fixture.entropy(7)
        var second = Fixture.entropy(7)
        #expect(first.bytes(10) == second.bytes(10))
        #expect(first.bytes(32) == second.bytes(32))
        var other = Fixture.entropy(8)
        #expect(first.bytes(32) != other.bytes(32))
    }
}
