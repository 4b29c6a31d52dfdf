import CanopyCore
import CanopyStore
import CanopyWire

/// Packs the revisions answering one `changesReply` into `revisions` messages that each stay
/// under `messageBytesMax` and `batchRevisionsMax`, with the `final` flag on the last.
struct RevisionsMessageBuilder {
    /// Room kept free in every message for its header and per-revision framing.
    static let headroomBytes = 64 << 10

    private let requestID: RequestID
    private var messages: [Revisions] = []
    private var current: [RevisionTransfer] = []
    private var currentBytes = 0
    private var pendingSkip = 0

    init(requestID: RequestID) {
        self.requestID = requestID
    }

    /// Marks the next requested revision as one this source cannot supply.
    mutating func skip() {
        pendingSkip += 1
    }

    /// Adds a revision, starting a new message when the current one is full.
    mutating func append(_ transfer: RevisionTransfer) {
        var transfer = transfer
        transfer.skip = pendingSkip
        pendingSkip = 0
        let bytes = transfer.body.count + 16 * transfer.ancestry.count + 16
        if !current.isEmpty,
            currentBytes + bytes > WireLimits.messageBytesMax - RevisionsMessageBuilder.headroomBytes
                || current.count == WireLimits.batchRevisionsMax
        {
            messages.append(Revisions(requestID: requestID, final: false, revisions: current))
            current = []
            currentBytes = 0
        }
        current.append(transfer)
        currentBytes += bytes
    }

    /// The messages, the last one marked final. With `sendEmpty`, a request whose revisions were
    /// all skipped still gets one (empty, final) message, so the peer can complete the batch.
    mutating func finish(sendEmpty: Bool) -> [Revisions] {
        if !current.isEmpty || (messages.isEmpty && sendEmpty) {
            messages.append(Revisions(requestID: requestID, final: true, revisions: current))
        } else if let last = messages.indices.last {
            messages[last].final = true
        }
        return messages
    }

    /// The wire form of a revision the store prepared: ancestry digests newest first, stopping
    /// before the first revision the peer said it has (named by its index instead). An imported
    /// revision id is marked as such when the peer accepts the mark (`marksImportedID`); a peer
    /// that does not refuses the revision, as it refuses any id that is not its content's hash.
    static func transfer(for revision: ForeignRevision, knownAncestors: [RevisionID], marksImportedID: Bool = true) -> RevisionTransfer {
        var ancestors = revision.path.ancestors
        var tail = 0
        if let last = ancestors.last, let known = knownAncestors.firstIndex(of: last) {
            ancestors.removeLast()
            tail = known + 1
        }
        let body: [UInt8]
        switch revision.body {
        case .canonical(let bytes): body = bytes
        case .value(let value): body = CanonicalJSON.encode(value)
        }
        return RevisionTransfer(
            ancestry: ancestors.map(RevisionDigest.init(of:)), knownAncestorTail: tail,
            cutParent: tail == 0 ? revision.path.rootParent.map(RevisionDigest.init(of:)) : nil, body: body,
            importedID: marksImportedID && revision.importedID)
    }
}
