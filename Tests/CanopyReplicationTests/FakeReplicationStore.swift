import CanopyCore
import CanopyWire
import Foundation
@testable import CanopyReplication
@testable import CanopyStore

/// A `ReplicationStore` held in memory, so replication's types can be driven without SQLite.
///
/// Data model:
///
///     feed        rows of the changes feed by sequence: readable changes and damaged rows (a
///                 page leaves the damaged ones out and reports them, as `DocumentStore` does)
///     held        the revisions the store has of each document (what `revsDiff` compares with)
///     supplied    the revisions `revisionsToSend` can read; a revision not here is "compacted"
///     locals      local documents (checkpoints)
///     horizons    peer horizons recorded, in order
///
/// Every call is recorded in `calls`, in order; an operation in `failing` throws a store error.
/// All state is behind one lock: the protocol requires `Sendable`, and a `Write` may run anywhere.
final class FakeReplicationStore: ReplicationStore, @unchecked Sendable {
    /// One call replication made, with what it passed.
    enum Call: Equatable {
        case changesPage(since: Int64, limit: Int)
        case get(String)
        case revisionsToSend([RevisionRequest], revsLimit: Int?, knownAncestorReach: Int)
        case revsDiff([RevisionOffer])
        case bulkInsertForeign(documentIDs: [String], local: String?)
        case localGet(String)
        case localPut(String, JSONValue)
        case localDelete(String)
        case recordPeerHorizon(peer: String, sequence: Int64)
    }

    /// An operation a test makes fail.
    enum Operation: Hashable {
        case changesPage, get, revisionsToSend, revsDiff, bulkInsertForeign, localGet, localPut, recordPeerHorizon
    }

    /// A row of the changes feed.
    enum FeedRow {
        case change(Change)
        case damaged(sequence: Int64, StoredDamage)

        var sequence: Int64 {
            switch self {
            case .change(let change): return change.sequence
            case .damaged(let sequence, _): return sequence
            }
        }
    }

    /// The error a failing operation throws.
    static let scriptedFailure = StoreError.corrupt(detail: "scripted failure")

    private struct State {
        var feed: [FeedRow] = []
        var held: [String: [RevisionID]] = [:]
        var supplied: [String: [RevisionID: ForeignRevision]] = [:]
        var bodies: [String: Document] = [:]
        var locals: [String: JSONValue] = [:]
        /// The ids `localPut(_:body:keepingAtMost:withPrefix:)` wrote, oldest first.
        var localOrder: [String] = []
        var horizons: [PeerHorizon] = []
        var insertProblems: [StoreInputError] = []
        var failing: Set<Operation> = []
        var calls: [Call] = []
    }

    private let lock = NSLock()
    private var state = State()
    let databaseIDBytes: [UInt8]
    let revsLimit = 1000

    init(databaseID: [UInt8] = [UInt8](repeating: 0xA1, count: 16)) {
        databaseIDBytes = databaseID
    }

    private func withState<T>(_ body: (inout State) throws(StoreError) -> T) throws(StoreError) -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&state)
    }

    private func locked<T>(_ body: (inout State) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(&state)
    }

    /// Records `call`, then throws when `operation` is failing.
    private func enter(_ operation: Operation, _ call: Call, _ state: inout State) throws(StoreError) {
        state.calls.append(call)
        if state.failing.contains(operation) { throw Self.scriptedFailure }
    }

    // MARK: Scripting

    /// Every call so far, in order.
    var calls: [Call] { locked { $0.calls } }
    /// Peer horizons recorded so far, in order.
    var horizons: [PeerHorizon] { locked { $0.horizons } }

    /// Forgets the calls recorded so far.
    func clearCalls() { locked { $0.calls.removeAll() } }

    /// Makes `operation` throw `scriptedFailure` (or succeed again).
    func fail(_ operation: Operation, _ failing: Bool = true) {
        locked { state in
            if failing { state.failing.insert(operation) } else { state.failing.remove(operation) }
        }
    }

    /// Appends a change of `documentID` to the feed at `sequence`; its document key is the
    /// sequence times 10 (distinct from the sequence, so a test sees which one travels).
    func appendChange(_ documentID: String, _ leaves: [LeafRevision], sequence: Int64, deleted: Bool = false) {
        let change = Change(
            sequence: sequence, documentID: documentID, leaves: leaves.map { ChangeLeaf(revision: $0.id, kind: $0.kind) },
            deleted: deleted, documentKey: sequence * 10)
        locked { $0.feed.append(.change(change)) }
    }

    /// Appends a damaged row at `sequence`: pages skip it and report it.
    func appendDamaged(sequence: Int64) {
        let damage = StoredDamage(documentID: "damaged-\(sequence)", revision: nil, reason: "leaf list unreadable")
        locked { $0.feed.append(.damaged(sequence: sequence, damage)) }
    }

    /// Makes the store hold `revisions` of `documentID` (for `revsDiff`).
    func hold(_ revisions: [RevisionID], of documentID: String) {
        locked { $0.held[documentID, default: []] += revisions }
    }

    /// Makes `revision` readable for `revisionsToSend`.
    func supply(_ revision: ForeignRevision) {
        locked { $0.supplied[revision.documentID, default: [:]][revision.path.leaf] = revision }
    }

    /// Gives `documentID` a current revision with `body` (for filters that read bodies).
    func setBody(_ body: JSONValue, of documentID: String, revision: RevisionID) {
        locked { $0.bodies[documentID] = Document(id: documentID, revision: revision, kind: .live, body: body) }
    }

    /// Makes the next `bulkInsertForeign` calls throw these problems, one a call.
    func refuseNextInserts(_ problems: [StoreInputError]) {
        locked { $0.insertProblems += problems }
    }

    /// Stores a local document without recording a call.
    func setLocal(_ id: String, _ body: JSONValue) {
        locked { $0.locals[id] = body }
    }

    /// A local document, read without recording a call.
    func local(_ id: String) -> JSONValue? {
        locked { $0.locals[id] }
    }

    // MARK: ReplicationStore

    var lastSequence: Int64 { locked { $0.feed.map(\.sequence).max() ?? 0 } }

    func changesPage(since: Int64, limit: Int) throws(StoreError) -> ChangesPage {
        try withState { state throws(StoreError) in
            try enter(.changesPage, .changesPage(since: since, limit: limit), &state)
            let after = state.feed.filter { $0.sequence > since }.sorted { $0.sequence < $1.sequence }
            let rows = after.prefix(limit)
            var changes: [Change] = []
            var damaged: [StoredDamage] = []
            for row in rows {
                switch row {
                case .change(let change): changes.append(change)
                case .damaged(_, let damage): damaged.append(damage)
                }
            }
            return ChangesPage(changes: changes, lastSequence: rows.last?.sequence, reachedEnd: after.count < limit, damaged: damaged)
        }
    }

    func get(id: String, options: GetOptions) throws(StoreError) -> Document {
        try withState { state throws(StoreError) in
            try enter(.get, .get(id), &state)
            guard let document = state.bodies[id] else { throw .notFound(documentID: id, revision: nil) }
            return document
        }
    }

    func revisionsToSend(_ requests: [RevisionRequest], revsLimit: Int?, knownAncestorReach: Int) throws(StoreError) -> [ForeignRevision] {
        try withState { state throws(StoreError) in
            try enter(.revisionsToSend, .revisionsToSend(requests, revsLimit: revsLimit, knownAncestorReach: knownAncestorReach), &state)
            var revisions: [ForeignRevision] = []
            for request in requests {
                for id in request.revisions {
                    guard let revision = state.supplied[request.documentID]?[id] else { throw .notFound(documentID: request.documentID, revision: id) }
                    revisions.append(revision)
                }
            }
            return revisions
        }
    }

    func revsDiff(inOrder offers: [RevisionOffer]) throws(StoreError) -> [RevsDiffEntry?] {
        try withState { state throws(StoreError) in
            try enter(.revsDiff, .revsDiff(offers), &state)
            return offers.map { offer in
                let held = state.held[offer.documentID] ?? []
                let missing = offer.revisions.filter { !held.contains($0) }.sorted()
                guard let newest = missing.last else { return nil }
                let ancestors = held.filter { $0.generation < newest.generation }.sorted().reversed()
                return RevsDiffEntry(documentID: offer.documentID, missing: missing, possibleAncestors: Array(ancestors))
            }
        }
    }

    /// Inserts every revision as new (each document's results are `newChain`) and stores `local`.
    /// Conflicts are not modelled: nothing is ever kept, so a retry settles nothing.
    func retryConflictResolution(policy: ConflictPolicy?) throws(StoreError) -> [ForeignDocumentResult] { [] }

    func bulkInsertForeign(
        checked batch: CheckedForeignBatch, local: LocalDocument?, policy: ConflictPolicy?
    ) throws(StoreError) -> [ForeignDocumentResult] {
        try withState { state throws(StoreError) in
            try enter(.bulkInsertForeign, .bulkInsertForeign(documentIDs: batch.revisions.map(\.documentID), local: local?.id), &state)
            if !state.insertProblems.isEmpty { throw .invalidInput(state.insertProblems.removeFirst()) }
            if let local { state.locals[local.id] = try? JSONValue.parse(local.bytes) }
            return batch.revisions.map { revision in
                state.held[revision.documentID, default: []].append(revision.path.leaf)
                return ForeignDocumentResult(documentID: revision.documentID, newChain: revision.path)
            }
        }
    }

    func localGet(_ id: String) throws(StoreError) -> JSONValue? {
        try withState { state throws(StoreError) in
            try enter(.localGet, .localGet(id), &state)
            return state.locals[id]
        }
    }

    func localPut(_ id: String, body: JSONValue) throws(StoreError) {
        try withState { state throws(StoreError) in
            try enter(.localPut, .localPut(id, body), &state)
            state.locals[id] = body
        }
    }

    func localPut(_ id: String, body: JSONValue, keepingAtMost max: Int, withPrefix prefix: String) throws(StoreError) -> Int {
        try withState { state throws(StoreError) in
            try enter(.localPut, .localPut(id, body), &state)
            state.localOrder.removeAll { $0 == id }
            var removed = 0
            while state.localOrder.filter({ $0.hasPrefix(prefix) }).count >= max, let oldest = state.localOrder.first(where: { $0.hasPrefix(prefix) }) {
                state.localOrder.removeAll { $0 == oldest }
                state.locals[oldest] = nil
                removed += 1
            }
            state.locals[id] = body
            state.localOrder.append(id)
            return removed
        }
    }

    func localDelete(_ id: String) throws(StoreError) -> Bool {
        locked { state in
            state.calls.append(.localDelete(id))
            return state.locals.removeValue(forKey: id) != nil
        }
    }

    /// The held documents as the digest covers them (none deleted).
    private var digestDocuments: [DigestDocument] {
        locked { state in state.held.map { DigestDocument(id: $0.key, leaves: $0.value.map { DigestLeaf(revision: $0, deleted: false) }) } }
    }

    var digestRootChildren: [DigestChild] { DigestTree.children(of: .root, from: digestDocuments) }

    func digestDocuments(prefix: String, under paths: [DigestNodePath]) throws(StoreError) -> [DigestDocument] {
        digestDocuments.filter { document in document.id.hasPrefix(prefix) && paths.contains { $0.contains(document.idHash) } }
    }

    func recordPeerHorizon(peer: String, sequence: Int64) throws(StoreError) {
        try withState { state throws(StoreError) in
            try enter(.recordPeerHorizon, .recordPeerHorizon(peer: peer, sequence: sequence), &state)
            state.horizons.append(PeerHorizon(peer: peer, sequence: sequence))
        }
    }

    /// Replication's types never observe commits (the session does), and a `StoreObserverToken`
    /// can be made only by `DocumentStore`: a call here is a test's mistake.
    func addCommitObserver(_ handler: @escaping @Sendable () -> Void) -> StoreObserverToken {
        preconditionFailure("FakeReplicationStore does not observe commits")
    }
}

/// The fake holds no attachment content and sets nothing aside.
extension FakeReplicationStore {
    var setAsideCount: Int { 0 }

    func awaitedAttachments() throws(StoreError) -> [AwaitedAttachment] { [] }

    func beginDownloadUnlessFetching(_ digest: AttachmentDigest, length: Int64) throws(StoreError) -> AttachmentDownload? {
        throw .attachment("the fake store keeps no attachment content")
    }

    func holdsAttachment(_ digest: AttachmentDigest, length: Int64) -> Bool { false }

    func settleAwaitingContent(
        digests: [AttachmentDigest]?, policy: ConflictPolicy?, limit: Int
    ) throws(StoreError) -> (results: [ForeignDocumentResult], more: Bool) { ([], false) }

    func refuseAwaiting(digest: AttachmentDigest) throws(StoreError) -> [String] { [] }

    func publishDownloads(_ digests: [AttachmentDigest]) throws(StoreError) {}

    func attachmentPart(of digest: AttachmentDigest, offset: Int64, maxBytes: Int) throws(StoreError) -> (length: Int64, bytes: [UInt8])? { nil }
    func reportDamagedContent(_ digest: AttachmentDigest) {}
    func awaitingContentCount() throws(StoreError) -> Int { 0 }
    func namesAttachment(
        _ digest: AttachmentDigest, idPrefix: String?, documentIDs: [String]?, admits: (String, [UInt8]) -> Bool
    ) throws(StoreError) -> Bool { false }
}
