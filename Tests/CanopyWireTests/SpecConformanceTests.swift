import Foundation
import Testing
@testable import CanopyWire

/// Reads the normative tables of `Protocol/replication-v1.md` and compares them with the code, so
/// the spec and the implementation cannot drift apart (`Protocol/design.md` §9.5).
@Suite("Specification matches the code")
struct SpecConformanceTests {
    static let specPath = "Protocol/replication-v1.md"

    /// Every constant of `WireLimits` by name. A constant added to `WireLimits.swift` but not here
    /// fails `limitsTable`, so this map (and the spec) must be updated with it.
    static let limitValues: [String: UInt64] = [
        "protocolVersion": WireLimits.protocolVersion,
        "attachmentPartBytesMax": UInt64(WireLimits.attachmentPartBytesMax),
        "attachmentDigestBytes": UInt64(WireLimits.attachmentDigestBytes),
        "digestNodesMax": UInt64(WireLimits.digestNodesMax),
        "digestDocumentsMax": UInt64(WireLimits.digestDocumentsMax),
        "frameHeaderBytes": UInt64(WireLimits.frameHeaderBytes),
        "secretstreamOverheadBytes": UInt64(WireLimits.secretstreamOverheadBytes),
        "framePlaintextBytesMax": UInt64(WireLimits.framePlaintextBytesMax),
        "frameCiphertextBytesMin": UInt64(WireLimits.frameCiphertextBytesMin),
        "frameCiphertextBytesMax": UInt64(WireLimits.frameCiphertextBytesMax),
        "fragmentBytesMax": UInt64(WireLimits.fragmentBytesMax),
        "messageBytesMax": UInt64(WireLimits.messageBytesMax),
        "secretstreamHeaderBytes": UInt64(WireLimits.secretstreamHeaderBytes),
        "handshakeTimeoutSeconds": UInt64(WireLimits.handshakeTimeoutSeconds),
        "handshakeMessage1Bytes": UInt64(WireLimits.handshakeMessage1Bytes),
        "handshakeMessage2Bytes": UInt64(WireLimits.handshakeMessage2Bytes),
        "handshakeMessage3Bytes": UInt64(WireLimits.handshakeMessage3Bytes),
        "pendingPeersMax": UInt64(WireLimits.pendingPeersMax),
        "docIDBytesMax": UInt64(WireLimits.docIDBytesMax),
        "bodyBytesMax": UInt64(WireLimits.bodyBytesMax),
        "replicationIDBytesMax": UInt64(WireLimits.replicationIDBytesMax),
        "checkpointValueBytesMax": UInt64(WireLimits.checkpointValueBytesMax),
        "errorMessageBytesMax": UInt64(WireLimits.errorMessageBytesMax),
        "changesEntriesMax": UInt64(WireLimits.changesEntriesMax),
        "entryRevisionsMax": UInt64(WireLimits.entryRevisionsMax),
        "batchRevisionsMax": UInt64(WireLimits.batchRevisionsMax),
        "knownAncestorsMax": UInt64(WireLimits.knownAncestorsMax),
        "revsLimitMax": UInt64(WireLimits.revsLimitMax),
        "filterDocIDsMax": UInt64(WireLimits.filterDocIDsMax),
        "inFlightBatchesMax": UInt64(WireLimits.inFlightBatchesMax),
        "inFlightRequestsMax": UInt64(WireLimits.inFlightRequestsMax),
        "subscriptionsMax": UInt64(WireLimits.subscriptionsMax),
        "heartbeatIntervalSeconds": UInt64(WireLimits.heartbeatIntervalSeconds),
        "receiveTimeoutSeconds": UInt64(WireLimits.receiveTimeoutSeconds),
        "multiplexedProtocolVersion": WireLimits.multiplexedProtocolVersion,
        "channelsMax": UInt64(WireLimits.channelsMax),
        "databaseNameBytesMax": UInt64(WireLimits.databaseNameBytesMax),
        "channelEnvelopeBytesMax": UInt64(WireLimits.channelEnvelopeBytesMax),
    ]

    /// The spec of version 2, which adds limits, codes and message types to version 1's tables.
    static let specV2Path = "Protocol/replication-v2.md"

    @Test("the limits tables of both versions list exactly the constants of WireLimits.swift, with their values")
    func limitsTable() throws {
        let rows = try VectorFiles.markdownTable(in: try VectorFiles.readText(Self.specPath), after: "## 9. Limits")
            + VectorFiles.markdownTable(in: try VectorFiles.readText(Self.specV2Path), after: "## 8. Limits")
        var specValues: [String: String] = [:]
        for row in rows {
            try #require(row.count >= 2)
            #expect(specValues[row[0]] == nil, "\(row[0]) listed twice")
            specValues[row[0]] = row[1]
        }
        let source = try VectorFiles.readText("Sources/CanopyWire/WireLimits.swift")
        let declared = source.split(separator: "\n").compactMap { line -> String? in
            guard let range = line.range(of: "public static let ") else { return nil }
            return String(line[range.upperBound...].prefix { $0.isLetter || $0.isNumber })
        }
        #expect(Set(declared) == Set(specValues.keys), "spec table and WireLimits.swift name different constants")
        #expect(Set(declared) == Set(Self.limitValues.keys), "update SpecConformanceTests.limitValues")
        for (name, value) in Self.limitValues {
            #expect(specValues[name] == String(value), "\(name): spec says \(specValues[name] ?? "nothing"), code \(value)")
        }
    }

    @Test("the error code tables of both versions match ErrorCode: codes, names and kinds")
    func errorCodes() throws {
        let rows = try VectorFiles.markdownTable(in: try VectorFiles.readText(Self.specPath), after: "### 8.1 Error codes")
            + VectorFiles.markdownTable(in: try VectorFiles.readText(Self.specV2Path), after: "### 7.1 Error codes")
        let kindNames: [ErrorCode.Kind: String] = [.notAnError: "not an error", .fatal: "fatal", .request: "request",
                                                   .handshake: "handshake"]
        // Handshake codes (0x03xx) are defined by CanopyCrypto and may appear in the table too.
        let wireRows = rows.filter { !$0[0].hasPrefix("0x03") }
        #expect(wireRows.count == ErrorCode.allDefined.count)
        for (row, defined) in zip(wireRows, ErrorCode.allDefined) {
            #expect(row[0] == String(format: "0x%04X", defined.code.rawValue))
            #expect(row[1] == defined.name)
            #expect(row[2] == kindNames[defined.code.kind])
        }
    }

    @Test("the message table lists every type with its byte")
    func messageTypes() throws {
        let rows = try VectorFiles.markdownTable(in: try VectorFiles.readText(Self.specPath), after: "## 6. Messages")
        #expect(rows.count == MessageType.allCases.count)
        for (row, type) in zip(rows, MessageType.allCases) {
            #expect(row[0] == String(format: "0x%02X", type.rawValue))
            #expect(row[1] == type.description)
        }
    }

    @Test("the example exchange in §10 is byte for byte what the code encodes")
    func exampleExchange() throws {
        let rows = try VectorFiles.markdownTable(in: try VectorFiles.readText(Self.specPath), after: "## 10. Example exchange")
        #expect(rows.count == VectorFixtures.exampleExchange.count)
        for (row, step) in zip(rows, VectorFixtures.exampleExchange) {
            #expect(row[1] == step.sender)
            #expect(row[2] == step.message.type.description)
            #expect(row[3] == VectorFiles.hex(step.message.encoded()), "\(step.name)")
        }
    }

    @Test("version 2's message table lists every added type with its byte")
    func messageTypesV2() throws {
        let rows = try VectorFiles.markdownTable(in: try VectorFiles.readText(Self.specV2Path), after: "## 3. Messages")
        #expect(rows.count == ConnectionMessageType.allCases.count)
        for (row, type) in zip(rows, ConnectionMessageType.allCases) {
            #expect(row[0] == String(format: "0x%02X", type.rawValue))
            #expect(row[1] == type.description)
        }
    }

    @Test("the example exchange of version 2 (§9) is byte for byte what the code encodes")
    func exampleExchangeV2() throws {
        let rows = try VectorFiles.markdownTable(in: try VectorFiles.readText(Self.specV2Path), after: "## 9. Example exchange")
        #expect(rows.count == ConnectionVectorFixtures.exampleExchange.count)
        for (row, step) in zip(rows, ConnectionVectorFixtures.exampleExchange) {
            #expect(row[1] == step.sender)
            #expect(row[2] == step.message.name)
            if case .channel(_, let inner) = step.message {
                #expect(row[3] == inner.type.description)
            } else {
                #expect(row[3] == "—")
            }
            #expect(row[4] == VectorFiles.hex(step.message.encoded()), "\(step.name)")
        }
    }
}
