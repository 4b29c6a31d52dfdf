import CanopyCore
@testable import CanopyWire

/// Random but valid messages from a seeded generator, for round-trip properties. Sizes are kept
/// small so thousands of messages run in well under a second; limits are tested separately.
struct RandomMessages {
    var random: SplitMix64

    init(seed: UInt64) {
        random = SplitMix64(seed: seed)
    }

    mutating func int(_ range: ClosedRange<Int>) -> Int {
        range.lowerBound + random.index(below: range.count)
    }

    mutating func bool() -> Bool { random.next() & 1 == 1 }

    mutating func bytes(_ range: ClosedRange<Int>) -> [UInt8] {
        (0..<int(range)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    }

    /// A varint-sized value biased towards the small and the extreme.
    mutating func wide() -> UInt64 {
        switch random.next() % 4 {
        case 0: return random.next() % 128
        case 1: return random.next() % 100_000
        case 2: return UInt64.max - random.next() % 3
        default: return random.next()
        }
    }

    mutating func requestID() -> RequestID { max(1, wide()) }

    /// Document ids mixing ASCII, multi-byte UTF-8 and the length limits.
    mutating func docID() -> String {
        let alphabet: [String] = ["a", "Z", "0", "-", "é", "€", "😀", "_", "ü", "/"]
        if random.next() % 50 == 0 { return String(repeating: "x", count: WireLimits.docIDBytesMax) }
        return (0..<int(1...20)).map { _ in alphabet[random.index(below: alphabet.count)] }.joined()
    }

    mutating func revisionID() -> RevisionID {
        let generation = random.next() % 10 == 0 ? RevisionID.generationMax : int(1...300)
        return RevisionID(generation: generation, digestHigh: random.next(), digestLow: random.next())
    }

    mutating func leaf() -> LeafRevision {
        LeafRevision(id: revisionID(), kind: RevisionKind.allCases[random.index(below: RevisionKind.allCases.count)])
    }

    mutating func text(_ maxBytes: Int) -> String {
        String(decoding: (0..<int(0...min(maxBytes, 40))).map { _ in UInt8(0x20 + random.next() % 0x5F) }, as: UTF8.self)
    }

    mutating func changes() -> Changes {
        var sequence: UInt64 = 0
        let entries = (0..<int(0...12)).map { _ -> ChangesEntry in
            sequence += UInt64(int(1...100_000))
            return ChangesEntry(sequence: sequence, docID: docID(), revisions: (0..<int(1...4)).map { _ in leaf() })
        }
        return Changes(requestID: requestID(), subscriptionID: requestID(), caughtUp: bool(), entries: entries)
    }

    mutating func replyItem() -> ChangesReplyItem {
        if bool() { return .complete }
        // Sometimes indices beyond the mask's reach, to exercise the list form.
        let top = bool() ? 70 : 8
        var missing = (0..<top).filter { _ in random.next() % 3 == 0 }
        if missing.isEmpty { missing = [int(0...(top - 1))] }
        return ChangesReplyItem(missing: missing, knownAncestors: (0..<int(0...3)).map { _ in revisionID() })
    }

    mutating func transfer() -> RevisionTransfer {
        let tail = int(0...3)
        let cutParent = tail == 0 && bool() ? RevisionDigest(high: random.next(), low: random.next()) : nil
        return RevisionTransfer(
            skip: int(0...3), ancestry: (0..<int(0...5)).map { _ in RevisionDigest(high: random.next(), low: random.next()) },
            knownAncestorTail: tail, cutParent: cutParent, body: bytes(0...300), importedID: int(0...3) == 0)
    }

    mutating func filter() -> ChangesFilter {
        switch random.next() % 3 {
        case 0: return .none
        case 1: return .docIDs((0..<int(1...5)).map { _ in docID() })
        default: return .idPrefix(docID())
        }
    }

    mutating func code() -> ErrorCode { ErrorCode(rawValue: UInt16(truncatingIfNeeded: random.next())) }

    /// One random message of the given type.
    mutating func message(of type: MessageType) -> Message {
        switch type {
        case .hello:
            return .hello(Hello(version: max(1, wide()), features: wide(), databaseID: bytes(16...16),
                                revsLimit: int(1...WireLimits.revsLimitMax), window: int(1...WireLimits.inFlightBatchesMax)))
        case .subscribe:
            return .subscribe(Subscribe(requestID: requestID(), replicationID: bytes(1...64), since: wide(),
                                        continuous: bool(), filter: filter()))
        case .unsubscribe: return .unsubscribe(Unsubscribe(subscriptionID: requestID()))
        case .changes: return .changes(changes())
        case .changesReply:
            return .changesReply(ChangesReply(requestID: requestID(), items: (0..<int(0...10)).map { _ in replyItem() }))
        case .revisions:
            return .revisions(Revisions(requestID: requestID(), final: bool(), revisions: (0..<int(0...5)).map { _ in transfer() }))
        case .revisionsAck:
            switch random.next() % 3 {
            case 0: return .revisionsAck(RevisionsAck(requestID: requestID(), status: .ok))
            case 1: return .revisionsAck(RevisionsAck(requestID: requestID(), status: .rejected(code: code(), message: text(1024))))
            default:
                let refusals = (0..<int(1...4)).map { _ in RevisionsAck.Refusal(documentID: docID(), reason: text(200)) }
                return .revisionsAck(RevisionsAck(requestID: requestID(), status: .okWithRefusals(refusals)))
            }
        case .checkpointGet: return .checkpointGet(CheckpointGet(requestID: requestID(), replicationID: bytes(1...64)))
        case .checkpoint: return .checkpoint(Checkpoint(requestID: requestID(), value: bool() ? bytes(0...200) : nil))
        case .checkpointSet:
            return .checkpointSet(CheckpointSet(requestID: requestID(), replicationID: bytes(1...64), value: bytes(0...200)))
        case .checkpointSetAck: return .checkpointSetAck(CheckpointSetAck(requestID: requestID()))
        case .heartbeat: return .heartbeat
        case .heartbeatEcho: return .heartbeatEcho
        case .error: return .error(ErrorMessage(requestID: bool() ? 0 : requestID(), code: code(), message: text(1024)))
        case .close: return .close(Close(code: code(), reason: text(1024)))
        case .attachmentGet:
            return .attachmentGet(AttachmentGet(
                requestID: requestID(), digest: bytes(32...32), offset: wide(),
                maxBytes: int(1...WireLimits.attachmentPartBytesMax)))
        case .attachmentPart:
            return .attachmentPart(AttachmentPart(requestID: requestID(), length: wide(), data: bytes(0...300)))
        case .digestGet:
            return .digestGet(DigestGet(requestID: requestID(), prefix: bool() ? "" : docID(), nodes: (0..<int(1...8)).map { _ in nodePath() }))
        case .digestNodes:
            return .digestNodes(DigestNodes(requestID: requestID(), prefix: bool() ? "" : docID(), answers: (0..<int(1...4)).map { _ in digestAnswer() }))
        }
    }

    mutating func nodePath() -> DigestNodePath { DigestNodePath(bytes: bytes(0...DigestTree.pathBytesMax))! }

    /// Children in ascending index order, or documents in ascending id order with ascending leaves.
    mutating func digestAnswer() -> DigestNodeAnswer {
        if bool() {
            let indexes = Set((0..<int(0...20)).map { _ in UInt8(truncatingIfNeeded: random.next()) }).sorted()
            return .children(indexes.map { DigestChild(index: $0, documents: max(1, wide()), digest: DatabaseDigest(bytes: bytes(32...32))!) })
        }
        let ids = Set((0..<int(0...6)).map { _ in docID() }).sorted()
        return .documents(ids.map { id in
            DigestDocument(id: id, leaves: Set((0..<int(1...3)).map { _ in revisionID() }).map { DigestLeaf(revision: $0, deleted: bool()) })
        })
    }

    /// A random message of a random type.
    mutating func message() -> Message {
        message(of: MessageType.allCases[random.index(below: MessageType.allCases.count)])
    }
}
