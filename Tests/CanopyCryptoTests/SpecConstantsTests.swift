import Foundation
import Testing
@testable import CanopyCrypto

/// Reads the handshake constants table of Protocol/replication-v1.md §4.1 and compares it with
/// the code, so the spec and the implementation cannot drift (STYLE.md §7).
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
}
