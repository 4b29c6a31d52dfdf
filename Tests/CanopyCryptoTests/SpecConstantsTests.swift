import CanopyWire
import Foundation
import Testing
@testable import CanopyCrypto

/// Reads the handshake constants table of Protocol/replication-v1.md §4.1 and compares it with
/// the code, so the spec and the implementation cannot drift (`Protocol/design.md` §9.5).
@Suite("Handshake constants in the spec")
struct SpecConstantsTests {
    static func specTable() throws -> [String: String] {
        let url = VectorTests.directory.deletingLastPathComponent().appendingPathComponent("replication-v1.md")
        let text = try String(contentsOf: url, encoding: .utf8)
        let section = try #require(text.range(of: "### 4.1 ")).upperBound
        let end = try #require(text.range(of: "### 4.2 ", range: section..<text.endIndex)).lowerBound
        var table: [String: String] = [:]
        for line in text[section..<end].split(separator: "\n") where line.hasPrefix("| `") {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 2, cells[0].hasPrefix("`"), cells[1].hasPrefix("`") else { continue }
            let name = cells[0].trimmingCharacters(in: ["`"])
            guard name.allSatisfy({ $0.isUppercase || $0 == "_" }) else { continue }  // notation rows
            table[name] = String(cells[1].split(separator: "`").first ?? "")
        }
        return table
    }

    @Test("the spec's handshake constants are the ones the code uses")
    func constantsMatch() throws {
        let table = try Self.specTable()
        let ascii = { (bytes: [UInt8]) in String(decoding: bytes, as: UTF8.self) }
        #expect(table["PROTO"] == ascii(HandshakeTranscript.protocolName))
        #expect(table["MAGIC"] == ascii(HandshakeTranscript.magic))
        #expect(table["LABEL_R"] == ascii(HandshakeTranscript.responderSignatureLabel))
        #expect(table["LABEL_I"] == ascii(HandshakeTranscript.initiatorSignatureLabel))
        #expect(table["CTX_HS"] == HandshakeTranscript.handshakeKeyContext.description)
        #expect(table["CTX_SESSION"] == HandshakeTranscript.sessionKeyContext.description)
        #expect(table.count == 6)
    }

    /// One value of every connection-failure case, by the name the spec uses.
    static let failures: [String: CryptoError] = [
        "handshakeMalformed": .handshakeMalformed, "handshakeVersionUnsupported": .handshakeVersionUnsupported(2),
        "handshakeNetworkMismatch": .handshakeNetworkMismatch, "handshakeSmallOrderKey": .handshakeSmallOrderKey,
        "handshakeDecryptionFailed": .handshakeDecryptionFailed, "handshakeBadSignature": .handshakeBadSignature,
        "handshakeUnexpectedBytes": .handshakeUnexpectedBytes, "handshakeTruncated": .handshakeTruncated,
        "handshakeSelfConnection": .handshakeSelfConnection, "handshakeTimedOut": .handshakeTimedOut,
        "peerNotAuthorized": .peerNotAuthorized(Fixture.alice.nodeID),
        "channelFraming": .channelFraming(.frameTooShort(declaredBytes: 0, minBytes: 17)),
        "channelDecryptionFailed": .channelDecryptionFailed, "channelUnexpectedTag": .channelUnexpectedTag(1),
        "channelDataAfterFinal": .channelDataAfterFinal, "channelEndedWithoutFinal": .channelEndedWithoutFinal,
    ]

    @Test("the spec's table of handshake and channel failures gives the codes the code reports")
    func failureCodesMatch() throws {
        let url = VectorTests.directory.deletingLastPathComponent().appendingPathComponent("replication-v1.md")
        let text = try String(contentsOf: url, encoding: .utf8)
        let section = try #require(text.range(of: "### 8.2 ")).upperBound
        let end = try #require(text.range(of: "## 9. ", range: section..<text.endIndex)).lowerBound
        var seen: Set<String> = []
        for line in text[section..<end].split(separator: "\n") where line.hasPrefix("| `") {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces).trimmingCharacters(in: ["`"]) }
            let failure = try #require(Self.failures[cells[0]], "spec lists unknown failure \(cells[0])")
            #expect(failure.code?.name == cells[1], "\(cells[0])")
            seen.insert(cells[0])
        }
        #expect(seen == Set(Self.failures.keys))
    }

    @Test("the spec's 0x03xx error codes are the handshake codes CanopyCrypto defines")
    func handshakeCodesMatch() throws {
        let url = VectorTests.directory.deletingLastPathComponent().appendingPathComponent("replication-v1.md")
        let text = try String(contentsOf: url, encoding: .utf8)
        let section = try #require(text.range(of: "### 8.1 ")).upperBound
        let end = try #require(text.range(of: "### 8.2 ", range: section..<text.endIndex)).lowerBound
        let rows = text[section..<end].split(separator: "\n").filter { $0.hasPrefix("| 0x03") }.map {
            $0.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces).trimmingCharacters(in: ["`"]) }
        }
        #expect(rows.map { $0[0] } == ErrorCode.handshakeCodes.map { String(format: "0x%04X", $0.code.rawValue) })
        #expect(rows.map { $0[1] } == ErrorCode.handshakeCodes.map(\.name))
        #expect(rows.allSatisfy { $0[2] == "handshake" })
        #expect(ErrorCode.handshakeCodes.allSatisfy { $0.code.kind == .handshake })
    }
}
