import CanopyCore
import Testing
@testable import CanopyWire

/// Hand-built hostile messages: each must be refused with the specific error that names the
/// problem, before anything of the claimed size is allocated.
@Suite("Bad input to the message decoder")
struct BadInputTests {
    private func varint(_ value: UInt64) -> [UInt8] {
        var writer = ByteWriter()
        writer.writeVarint(value)
        return writer.bytes
    }

    /// `changes` with one entry whose only revision is encoded as the given key and digest.
    private func changesWithRevisionKey(_ key: UInt64) -> [UInt8] {
        [MessageType.changes.rawValue, 1, 1, 0, 1, 1, 1, UInt8(ascii: "d"), 1] + varint(key) + [UInt8](repeating: 0xAB, count: 16)
    }

    @Test("a revision with generation 0 or above the maximum is invalidRevision")
    func badGeneration() throws {
        let zero = changesWithRevisionKey(0 << 3 | 0)
        #expect(throws: ProtocolError.invalidRevisionGeneration(field: "changes.revision", generation: 0)) {
            try Message.decode(zero)
        }
        let tooHigh = UInt64(RevisionID.generationMax) + 1
        #expect(throws: ProtocolError.invalidRevisionGeneration(field: "changes.revision", generation: tooHigh)) {
            try Message.decode(changesWithRevisionKey(tooHigh << 3 | 1))
        }
        let atMax = try Message.decode(changesWithRevisionKey(UInt64(RevisionID.generationMax) << 3 | 3))
        guard case .changes(let changes) = atMax else { Issue.record("not changes"); return }
        #expect(changes.entries[0].revisions[0].id.generation == RevisionID.generationMax)
        #expect(changes.entries[0].revisions[0].kind == .closed)
        #expect(ProtocolError.invalidRevisionGeneration(field: "", generation: 0).code == .invalidRevision)
    }

    @Test("a revision kind that RevisionKind does not define is invalidRevision", arguments: [2, 6, 7] as [UInt64])
    func badKind(kind: UInt64) {
        #expect(throws: ProtocolError.invalidRevisionKind(field: "changes.revision", kind: kind)) {
            try Message.decode(changesWithRevisionKey(5 << 3 | kind))
        }
    }

    @Test("a generation of 0 in a known ancestor of a reply is refused")
    func badKnownAncestor() {
        let reply: [UInt8] = [MessageType.changesReply.rawValue, 1, 1, 0b11, 1, 0] + [UInt8](repeating: 0, count: 16)
        #expect(throws: ProtocolError.invalidRevisionGeneration(field: "changesReply.knownAncestor", generation: 0)) {
            try Message.decode(reply)
        }
    }

    @Test("truncated, overlong and non-minimal varints are malformed")
    func badVarints() throws {
        let unsubscribe = MessageType.unsubscribe.rawValue
        #expect(throws: ProtocolError.truncated(field: "unsubscribe.subscriptionID")) { try Message.decode([unsubscribe, 0x80]) }
        #expect(throws: ProtocolError.truncated(field: "unsubscribe.subscriptionID")) { try Message.decode([unsubscribe, 0xFF, 0xFF]) }
        let eleven = [unsubscribe] + [UInt8](repeating: 0xFF, count: 10) + [0x01]
        #expect(throws: ProtocolError.malformedVarint(field: "unsubscribe.subscriptionID")) { try Message.decode(eleven) }
        let beyond64 = [unsubscribe] + [UInt8](repeating: 0xFF, count: 9) + [0x02]
        #expect(throws: ProtocolError.malformedVarint(field: "unsubscribe.subscriptionID")) { try Message.decode(beyond64) }
        #expect(throws: ProtocolError.malformedVarint(field: "unsubscribe.subscriptionID")) { try Message.decode([unsubscribe, 0x81, 0x00]) }
        // The largest 64-bit value is exactly ten bytes and is accepted.
        let max = [unsubscribe] + [UInt8](repeating: 0xFF, count: 9) + [0x01]
        #expect(try Message.decode(max) == .unsubscribe(Unsubscribe(subscriptionID: UInt64.max)))
    }

    @Test("counts and lengths above their limits are refused before the claimed bytes exist")
    func overLimits() {
        let huge = varint(UInt64(Int.max))
        // changes with 1001 entries (and no bytes for any of them).
        #expect(throws: ProtocolError.outOfRange(field: "changes.entryCount", value: 1001, min: 0, max: 1000)) {
            try Message.decode([MessageType.changes.rawValue, 1, 1, 0] + varint(1001))
        }
        // A document id claiming 1025 bytes.
        #expect(throws: ProtocolError.outOfRange(field: "changes.docID length", value: 1025, min: 1, max: 1024)) {
            try Message.decode([MessageType.changes.rawValue, 1, 1, 0, 1, 1] + varint(1025))
        }
        // A body claiming 2^63 bytes.
        #expect(throws: ProtocolError.outOfRange(field: "revisions.body length", value: UInt64(Int.max), min: 0,
                                                 max: UInt64(WireLimits.bodyBytesMax))) {
            try Message.decode([MessageType.revisions.rawValue, 1, 0, 1, 0, 0] + huge)
        }
        // An ancestry claiming revsLimitMax digests.
        #expect(throws: ProtocolError.outOfRange(field: "revisions.ancestryCount", value: 10_000, min: 0, max: 9_999)) {
            try Message.decode([MessageType.revisions.rawValue, 1, 0, 1, 0] + varint(10_000 << 6))
        }
        // An ancestry of 9,999 digests with none of them present.
        #expect(throws: ProtocolError.truncated(field: "revisions.ancestry")) {
            try Message.decode([MessageType.revisions.rawValue, 1, 0, 1, 0] + varint(9_999 << 6))
        }
        // A checkpoint value one byte over 64 KiB, a replication id of 65 bytes, an empty one.
        #expect(throws: ProtocolError.outOfRange(field: "checkpoint.value length", value: 65_537, min: 0, max: 65_536)) {
            try Message.decode([MessageType.checkpoint.rawValue, 1, 1] + varint(65_537))
        }
        #expect(throws: ProtocolError.outOfRange(field: "checkpointGet.replicationID length", value: 65, min: 1, max: 64)) {
            try Message.decode([MessageType.checkpointGet.rawValue, 1, 65] + [UInt8](repeating: 0, count: 65))
        }
        #expect(throws: ProtocolError.outOfRange(field: "checkpointGet.replicationID length", value: 0, min: 1, max: 64)) {
            try Message.decode([MessageType.checkpointGet.rawValue, 1, 0])
        }
        // A hello announcing a window of 17.
        #expect(throws: ProtocolError.outOfRange(field: "hello.window", value: 17, min: 1, max: 16)) {
            try Message.decode([MessageType.hello.rawValue, 1, 0] + [UInt8](repeating: 0, count: 16) + [1, 17])
        }
    }

    @Test("a tail beyond knownAncestorsMax is refused")
    func badTail() {
        #expect(throws: ProtocolError.outOfRange(field: "revisions.tail", value: 33, min: 0, max: 32)) {
            try Message.decode([MessageType.revisions.rawValue, 1, 0, 1, 0, 33, 0])
        }
    }

    @Test("the batch revision total is enforced across entries")
    func batchTotal() {
        // Five entries of 1000 revisions each would be 5000 > batchRevisionsMax; the fifth count fails.
        var writer = ByteWriter()
        writer.writeByte(MessageType.changes.rawValue)
        writer.writeVarint(1); writer.writeVarint(1); writer.writeByte(0); writer.writeVarint(5)
        for entry in 0..<5 {
            writer.writeVarint(1)
            writer.writeString("doc\(entry)", maxBytes: 1024)
            writer.writeVarint(1000)
            if entry < 4 {
                for _ in 0..<1000 { writer.writeVarint(1 << 3); writer.writeRaw([UInt8](repeating: 1, count: 16)) }
            }
        }
        #expect(throws: ProtocolError.outOfRange(field: "changes.revisionCount", value: 1000, min: 1, max: 96)) {
            try Message.decode(writer.bytes)
        }
    }

    @Test("invalid UTF-8 in a document id, a filter or a reason is malformed", arguments: [
        [0xFF], [0xC0, 0x80], [0xED, 0xA0, 0x80], [0xE2, 0x82], [0xF4, 0x90, 0x80, 0x80],
    ] as [[UInt8]])
    func invalidUTF8(bad: [UInt8]) {
        let count = UInt8(bad.count)
        #expect(throws: ProtocolError.invalidUTF8(field: "changes.docID")) {
            try Message.decode([MessageType.changes.rawValue, 1, 1, 0, 1, 1, count] + bad + [1, 8] + [UInt8](repeating: 0, count: 16))
        }
        #expect(throws: ProtocolError.invalidUTF8(field: "subscribe.filter.prefix")) {
            try Message.decode([MessageType.subscribe.rawValue, 1, 1, 9, 0, 0, 2, count] + bad)
        }
        #expect(throws: ProtocolError.invalidUTF8(field: "close.reason")) {
            try Message.decode([MessageType.close.rawValue, 0, 0, count] + bad)
        }
    }

    @Test("a string field decodes as String(validating:) does, ASCII or not, at every length and position")
    func stringDecoding() {
        // The reader decodes ASCII without the general validation; one non-ASCII byte anywhere
        // in the first or last word, or in the tail shorter than a word, must send it the long way.
        let inserts: [[UInt8]] = [[0xC3, 0xA9], [0xFF], [0xC0, 0x80], [0xED, 0xA0, 0x80], [0xE2, 0x82], [0xF0, 0x9F, 0x8C, 0xB3], [0x80], [0x7F], [0x00]]
        for length in 0...20 {
            let ascii = (0..<length).map { UInt8(ascii: "a") + UInt8($0 % 26) }
            #expect(ascii.withUnsafeBufferPointer { ByteReader.string($0) } == String(decoding: ascii, as: UTF8.self))
            for position in 0...length {
                for insert in inserts {
                    var bytes = ascii
                    bytes.insert(contentsOf: insert, at: position)
                    let decoded = bytes.withUnsafeBufferPointer { ByteReader.string($0) }
                    #expect(decoded == String(validating: bytes, as: UTF8.self), "\(bytes)")
                }
            }
        }
    }

    @Test("reserved flag bits, unknown enumerations and request id 0 are refused")
    func reserved() {
        #expect(throws: ProtocolError.invalidValue(field: "changes.flags", value: 2)) {
            try Message.decode([MessageType.changes.rawValue, 1, 1, 2, 0])
        }
        #expect(throws: ProtocolError.invalidValue(field: "revisions.flags", value: 0x80)) {
            try Message.decode([MessageType.revisions.rawValue, 1, 0x80, 0])
        }
        #expect(throws: ProtocolError.invalidValue(field: "subscribe.filter", value: 3)) {
            try Message.decode([MessageType.subscribe.rawValue, 1, 1, 9, 0, 0, 3])
        }
        #expect(throws: ProtocolError.invalidValue(field: "revisionsAck.status", value: 3)) {
            try Message.decode([MessageType.revisionsAck.rawValue, 1, 3])
        }
        #expect(throws: ProtocolError.invalidValue(field: "checkpointSetAck.requestID", value: 0)) {
            try Message.decode([MessageType.checkpointSetAck.rawValue, 0])
        }
        #expect(throws: ProtocolError.unsupportedVersion(offered: 0)) {
            try Message.decode([MessageType.hello.rawValue, 0])
        }
    }

    @Test("a reply item must use the mask form when it can, and a mask may not be empty")
    func replyForms() {
        #expect(throws: ProtocolError.invalidValue(field: "changesReply.missing", value: 1)) {
            try Message.decode([MessageType.changesReply.rawValue, 1, 1, 1, 0])
        }
        // List form (header 2: one index) naming index 5, which the mask can hold.
        #expect(throws: ProtocolError.invalidValue(field: "changesReply.missing", value: 2)) {
            try Message.decode([MessageType.changesReply.rawValue, 1, 1, 2, 5, 0])
        }
        // List form naming index 63 is the canonical way to say it.
        let reply = ChangesReply(requestID: 1, items: [ChangesReplyItem(missing: [63])])
        #expect(Message.changesReply(reply).encoded() == [MessageType.changesReply.rawValue, 1, 1, 2, 63, 0])
    }
}
