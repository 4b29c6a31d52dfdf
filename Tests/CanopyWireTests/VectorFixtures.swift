import CanopyCore
@testable import CanopyWire

/// The messages and byte strings behind `Protocol/vectors/`. The vector files are generated from
/// these (set `CANOPY_WRITE_VECTORS=1` when running `VectorTests`) and checked against them on
/// every run, so a change to the codec that alters a byte fails until the vectors are regenerated
/// on purpose and the diff reviewed.
enum VectorFixtures {
    static func rev(_ generation: Int, _ hex: String) -> RevisionID {
        RevisionID("\(generation)-\(hex)")!
    }

    static let digestA = "0123456789abcdef0123456789abcdef"
    static let digestB = "fedcba9876543210fedcba9876543210"
    static let digestC = "00112233445566778899aabbccddeeff"
    static let databaseA = Array(0x10...0x1F).map { UInt8($0) }
    static let databaseB = Array(0x20...0x2F).map { UInt8($0) }
    static let replication = Array("replication-0001".utf8)

    /// The example exchange of the spec's §10, in order, with who sends each message.
    static let exampleExchange: [(sender: String, name: String, message: Message)] = [
        ("A", "example-hello-a", .hello(Hello(databaseID: databaseA, revsLimit: 1000, window: 4))),
        ("B", "example-hello-b", .hello(Hello(databaseID: databaseB, revsLimit: 1000, window: 4))),
        ("B", "example-checkpoint-get", .checkpointGet(CheckpointGet(requestID: 1, replicationID: replication))),
        ("A", "example-checkpoint-none", .checkpoint(Checkpoint(requestID: 1, value: nil))),
        ("B", "example-subscribe", .subscribe(Subscribe(requestID: 2, replicationID: replication, since: 0,
                                                          continuous: false, filter: .none))),
        ("A", "example-changes", .changes(Changes(requestID: 1, subscriptionID: 2, caughtUp: true, entries: [
            ChangesEntry(sequence: 1, docID: "todo", revisions: [LeafRevision(id: rev(2, digestB), kind: .live)]),
            ChangesEntry(sequence: 2, docID: "gone", revisions: [LeafRevision(id: rev(1, digestC), kind: .deleted)]),
        ]))),
        ("B", "example-changes-reply", .changesReply(ChangesReply(requestID: 1, items: [
            ChangesReplyItem(missing: [0], knownAncestors: [rev(1, digestA)]),
            ChangesReplyItem(missing: [0]),
        ]))),
        ("A", "example-revisions", .revisions(Revisions(requestID: 1, final: true, revisions: [
            RevisionTransfer(ancestry: [], knownAncestorTail: 1, body: Array(#"{"done":true}"#.utf8)),
            RevisionTransfer(ancestry: [], knownAncestorTail: 0, body: Array("{}".utf8)),
        ]))),
        ("B", "example-revisions-ack", .revisionsAck(RevisionsAck(requestID: 1, status: .ok))),
        ("B", "example-checkpoint-set", .checkpointSet(CheckpointSet(requestID: 3, replicationID: replication,
                                                                       value: Array(#"{"seq":2}"#.utf8)))),
        ("A", "example-checkpoint-set-ack", .checkpointSetAck(CheckpointSetAck(requestID: 3))),
        ("B", "example-close", .close(Close(code: .normal, reason: "done"))),
    ]

    /// Further valid messages, so every type and every encoding form has a vector.
    static let otherMessages: [(name: String, message: Message)] = [
        ("hello-features-and-limits", .hello(Hello(version: 2, features: 0x8000_0000_0000_0001, databaseID: databaseB,
                                                   revsLimit: WireLimits.revsLimitMax, window: WireLimits.inFlightBatchesMax))),
        ("subscribe-continuous-doc-ids", .subscribe(Subscribe(requestID: 300, replicationID: [0xAB], since: 1_000_000,
                                                              continuous: true, filter: .docIDs(["a", "é", "😀"])))),
        ("subscribe-prefix", .subscribe(Subscribe(requestID: 5, replicationID: replication, since: 7, continuous: false,
                                                  filter: .idPrefix("user:")))),
        ("unsubscribe", .unsubscribe(Unsubscribe(subscriptionID: 2))),
        ("changes-empty-caught-up", .changes(Changes(requestID: 9, subscriptionID: 2, caughtUp: true, entries: []))),
        ("changes-conflicted-and-kinds", .changes(Changes(requestID: 10, subscriptionID: 2, caughtUp: false, entries: [
            ChangesEntry(sequence: 200, docID: "doc", revisions: [
                LeafRevision(id: rev(3, digestA), kind: .live), LeafRevision(id: rev(16, digestB), kind: .closed),
                LeafRevision(id: rev(4_294_967_295, digestC), kind: .resolvedDeleted)]),
            ChangesEntry(sequence: 100_000, docID: "x", revisions: [LeafRevision(id: rev(129, digestA), kind: .resolvedLive)]),
        ]))),
        ("changes-reply-list-form", .changesReply(ChangesReply(requestID: 10, items: [
            ChangesReplyItem(missing: [1, 63, 200], knownAncestors: [rev(2, digestC), rev(1, digestA)]), .complete,
        ]))),
        ("revisions-ancestry-skip-partial", .revisions(Revisions(requestID: 10, final: false, revisions: [
            RevisionTransfer(skip: 1, ancestry: [RevisionDigest(of: rev(1, digestA)), RevisionDigest(of: rev(1, digestB))],
                             knownAncestorTail: 0, body: Array(#"{"a":[1,2]}"#.utf8)),
        ]))),
        ("revisions-cut-parent", .revisions(Revisions(requestID: 11, final: true, revisions: [
            RevisionTransfer(ancestry: [RevisionDigest(of: rev(4, digestA))], knownAncestorTail: 0,
                             cutParent: RevisionDigest(of: rev(3, digestC)), body: Array("{}".utf8)),
        ]))),
        ("revisions-imported-id", .revisions(Revisions(requestID: 12, final: true, revisions: [
            RevisionTransfer(ancestry: [RevisionDigest(of: rev(1, digestA))], knownAncestorTail: 0,
                             body: Array(#"{"from":"couchdb"}"#.utf8), importedID: true),
            RevisionTransfer(ancestry: [], knownAncestorTail: 1, body: Array("{}".utf8)),
        ]))),
        ("revisions-ack-with-refusals", .revisionsAck(RevisionsAck(requestID: 12, status: .okWithRefusals([
            RevisionsAck.Refusal(documentID: "damaged", reason: "revision 2-… does not match its content"),
            RevisionsAck.Refusal(documentID: "é", reason: ""),
        ])))),
        ("revisions-ack-rejected", .revisionsAck(RevisionsAck(requestID: 10, status: .rejected(code: .invalidDocument,
                                                                                                 message: "body is not an object")))),
        ("checkpoint-found", .checkpoint(Checkpoint(requestID: 4, value: Array(#"{"seq":2}"#.utf8)))),
        ("heartbeat", .heartbeat),
        ("heartbeat-echo", .heartbeatEcho),
        ("error-for-request", .error(ErrorMessage(requestID: 2, code: .forbidden, message: "not shared"))),
        ("error-no-request", .error(ErrorMessage(requestID: 0, code: .busy, message: ""))),
        ("close-fatal", .close(Close(code: .unknownMessageType, reason: "unknown message type 255"))),
        ("attachment-get", .attachmentGet(AttachmentGet(requestID: 5, digest: Array(0..<32), offset: 262_144, maxBytes: 262_144))),
        ("attachment-part", .attachmentPart(AttachmentPart(requestID: 5, length: 262_147, data: [0x61, 0x62, 0x63]))),
        ("attachment-part-past-end", .attachmentPart(AttachmentPart(requestID: 6, length: 3, data: []))),
        ("digest-get-root", .digestGet(DigestGet(requestID: 7, prefix: "", nodes: [.root]))),
        ("digest-get-under-prefix", .digestGet(DigestGet(requestID: 8, prefix: "doc-", nodes: [DigestNodePath(bytes: [0x5A])!, DigestNodePath(bytes: [0x5B, 0x0F])!]))),
        ("digest-nodes-children", .digestNodes(DigestNodes(requestID: 7, prefix: "", answers: [.children([
            DigestChild(index: 0x5A, documents: 1, digest: DatabaseDigest(bytes: Hex.decode("ba8e0b21cbfee5acb5cacc8810e61a6305446a9cf60dd884db6cf677dbfd14d5")!)!),
            DigestChild(index: 0x5B, documents: 1, digest: DatabaseDigest(bytes: Hex.decode("827c04d48e8bfa3c8ef6d95cbf67a4d89c27ab1ebb467ac700253c2aa68ed255")!)!),
        ])]))),
        ("digest-nodes-documents", .digestNodes(DigestNodes(requestID: 8, prefix: "doc-", answers: [
            .documents([DigestDocument(id: "doc-1", leaves: [DigestLeaf(revision: RevisionID("1-967a00dff5e02add41819138abb3284d")!, deleted: false)])]),
            .documents([DigestDocument(id: "doc-2", leaves: [
                DigestLeaf(revision: RevisionID("2-7051cbe5c8faecd085a3fa619e6e6337")!, deleted: false),
                DigestLeaf(revision: RevisionID("2-a1b2c3d4e5f60718293a4b5c6d7e8f90")!, deleted: true),
            ])]),
        ]))),
    ]

    /// Every valid message vector, by name.
    static var validMessages: [(name: String, message: Message)] {
        exampleExchange.map { ($0.name, $0.message) } + otherMessages
    }

    /// Byte strings a decoder must refuse, with the code it must report.
    static let invalidMessages: [(name: String, bytes: [UInt8], code: ErrorCode)] = [
        ("empty", [], .malformedMessage),
        ("unknown-type-0", [0x00], .unknownMessageType),
        ("unknown-type-ff", [0xFF, 0x01], .unknownMessageType),
        ("hello-version-0", [0x01, 0x00], .unsupportedVersion),
        ("hello-window-17", [0x01, 0x01, 0x00] + databaseA + [0x01, 0x11], .limitExceeded),
        ("heartbeat-trailing-byte", [0x0C, 0x00], .malformedMessage),
        ("unsubscribe-truncated-varint", [0x03, 0x80], .malformedMessage),
        ("unsubscribe-non-minimal-varint", [0x03, 0x81, 0x00], .malformedMessage),
        ("unsubscribe-request-id-0", [0x03, 0x00], .malformedMessage),
        ("changes-generation-0", [0x04, 0x01, 0x02, 0x00, 0x01, 0x01, 0x01, 0x61, 0x01, 0x00] + [UInt8](repeating: 0, count: 16),
         .invalidRevision),
        ("changes-kind-2", [0x04, 0x01, 0x02, 0x00, 0x01, 0x01, 0x01, 0x61, 0x01, 0x0A] + [UInt8](repeating: 0, count: 16),
         .invalidRevision),
        ("changes-doc-id-invalid-utf8", [0x04, 0x01, 0x02, 0x00, 0x01, 0x01, 0x02, 0xC0, 0x80, 0x01, 0x08]
            + [UInt8](repeating: 0, count: 16), .malformedMessage),
        ("changes-1001-entries", [0x04, 0x01, 0x02, 0x00, 0xE9, 0x07], .limitExceeded),
        ("changes-reserved-flag", [0x04, 0x01, 0x02, 0x02, 0x00], .malformedMessage),
        ("changes-sequence-delta-0", [0x04, 0x01, 0x02, 0x00, 0x02, 0x01, 0x01, 0x61, 0x01, 0x08]
            + [UInt8](repeating: 0, count: 16) + [0x00], .malformedMessage),
        ("changes-reply-empty-mask", [0x05, 0x01, 0x01, 0x01, 0x00], .malformedMessage),
        ("changes-reply-list-form-for-small-index", [0x05, 0x01, 0x01, 0x02, 0x05, 0x00], .malformedMessage),
        ("revisions-body-too-long", [0x06, 0x01, 0x00, 0x01, 0x00, 0x00, 0x81, 0x80, 0x80, 0x08], .limitExceeded),
        // shape = 9999 × 64: 9,999 digests announced, none present.
        ("revisions-ancestry-truncated", [0x06, 0x01, 0x00, 0x01, 0x00, 0xC0, 0x87, 0x27], .malformedMessage),
        ("revisions-tail-33", [0x06, 0x01, 0x00, 0x01, 0x00, 0x21, 0x00], .limitExceeded),
        ("revisions-tail-62", [0x06, 0x01, 0x00, 0x01, 0x00, 0x3E, 0x00], .limitExceeded),
        // tail 63: a cut parent's 16 digest bytes must follow; 8 are there.
        ("revisions-revision-flags-all-clear", [0x06, 0x01, 0x03, 0x01, 0x00, 0x00, 0x00, 0x02, 0x7B, 0x7D], .malformedMessage),
        ("revisions-revision-flag-reserved", [0x06, 0x01, 0x03, 0x01, 0x02, 0x00, 0x00, 0x02, 0x7B, 0x7D], .malformedMessage),
        ("revisions-reserved-flag", [0x06, 0x01, 0x04, 0x00], .malformedMessage),
        ("revisions-ack-no-refusals", [0x07, 0x01, 0x02, 0x00], .limitExceeded),
        ("revisions-ack-status-3", [0x07, 0x01, 0x03], .malformedMessage),
        ("revisions-cut-parent-truncated", [0x06, 0x01, 0x00, 0x01, 0x00, 0x3F] + [UInt8](repeating: 0, count: 8),
         .malformedMessage),
        ("checkpoint-found-2", [0x09, 0x01, 0x02], .malformedMessage),
        ("checkpoint-get-empty-replication-id", [0x08, 0x01, 0x00], .limitExceeded),
        ("digest-get-no-nodes", [0x16, 0x01, 0x00, 0x00], .limitExceeded),
        ("digest-get-path-of-4-bytes", [0x16, 0x01, 0x00, 0x01, 0x04, 0x01, 0x02, 0x03, 0x04], .limitExceeded),
        ("digest-nodes-kind-2", [0x17, 0x01, 0x00, 0x01, 0x02], .malformedMessage),
        ("digest-nodes-children-out-of-order", [0x17, 0x01, 0x00, 0x01, 0x00, 0x02, 0x05, 0x01] + [UInt8](repeating: 0, count: 32)
            + [0x05, 0x01] + [UInt8](repeating: 0, count: 32), .malformedMessage),
        ("digest-nodes-child-of-0-documents", [0x17, 0x01, 0x00, 0x01, 0x00, 0x01, 0x05, 0x00] + [UInt8](repeating: 0, count: 32), .limitExceeded),
        ("attachment-get-max-bytes-0", [0x14, 0x01] + [UInt8](repeating: 0xAB, count: 32) + [0x00, 0x00], .limitExceeded),
        ("attachment-get-max-bytes-over", [0x14, 0x01] + [UInt8](repeating: 0xAB, count: 32) + [0x00, 0x81, 0x80, 0x10], .limitExceeded),
        ("attachment-get-digest-truncated", [0x14, 0x01] + [UInt8](repeating: 0xAB, count: 31), .malformedMessage),
        ("attachment-part-data-over", [0x15, 0x01, 0x05, 0x81, 0x80, 0x10], .limitExceeded),
    ]
}
