import CanopyCore
import CanopyStore
import CanopyWire
@testable import CanopyReplication

/// A first-generation live revision of a document, its id the hash of its canonical body
/// `{"content":…,"of":documentID}` (so two documents never share a revision id), as a peer sends
/// it. `tampered` gives the same id with another body: the content check refuses it.
struct SampleRevision {
    let documentID: String
    let body: [UInt8]
    let id: RevisionID

    init(_ documentID: String, content: String = "v1") {
        self.documentID = documentID
        body = Array(#"{"content":"\#(content)","of":"\#(documentID)"}"#.utf8)
        id = RevisionHasher.revisionID(parent: nil, kind: .live, canonicalBody: body)
    }

    private init(documentID: String, body: [UInt8], id: RevisionID) {
        self.documentID = documentID
        self.body = body
        self.id = id
    }

    /// The same id over a body it is not the hash of.
    var tampered: SampleRevision {
        SampleRevision(documentID: documentID, body: Array(#"{"content":"forged"}"#.utf8), id: id)
    }

    var leaf: LeafRevision { LeafRevision(id: id, kind: .live) }

    /// A path of the leaf alone: a first generation has no ancestors to check, so it cannot throw.
    var path: RevisionPath { try! RevisionPath(leaf: id, kind: .live) }

    func entry(sequence: UInt64) -> ChangesEntry {
        ChangesEntry(sequence: sequence, docID: documentID, revisions: [leaf])
    }

    var foreign: ForeignRevision {
        ForeignRevision(documentID: documentID, path: path, body: .canonical(body))
    }

    func received(sequence: UInt64) -> ReceivedRevision {
        ReceivedRevision(docID: documentID, sequence: sequence, path: path, body: body)
    }

    /// The revision as a source sends it to a peer that knows nothing of the document.
    var transfer: RevisionTransfer {
        RevisionTransfer(ancestry: [], knownAncestorTail: 0, body: body)
    }
}

/// The messages a type under test sends and the request ids it takes, in order: a
/// `Pusher.Outbox` without a session.
final class RecordingOutbox {
    private(set) var sent: [Message] = []
    private var nextID: RequestID

    init(firstRequestID: RequestID = 1) {
        nextID = firstRequestID
    }

    var outbox: Pusher.Outbox {
        Pusher.Outbox(
            nextRequestID: { [unowned self] in
                defer { nextID += 1 }
                return nextID
            },
            send: { [unowned self] in sent.append($0) })
    }

    /// The messages sent since the last call.
    func take() -> [Message] {
        defer { sent.removeAll() }
        return sent
    }
}

extension Message {
    var changes: Changes? {
        if case .changes(let changes) = self { return changes }
        return nil
    }

    var revisions: Revisions? {
        if case .revisions(let revisions) = self { return revisions }
        return nil
    }

    var checkpointSet: CheckpointSet? {
        if case .checkpointSet(let set) = self { return set }
        return nil
    }
}

/// The replication error `body` throws; nil when it returns or throws anything else.
func thrown<T>(_ body: () throws -> T) -> ReplicationError? {
    do {
        _ = try body()
        return nil
    } catch {
        return error as? ReplicationError
    }
}

extension ReplicationError {
    /// The detail of an `invalidReference` violation; nil for any other error.
    var invalidReference: String? {
        if case .protocolViolation(.invalidReference(let detail)) = self { return detail }
        return nil
    }

    /// True for a store failure.
    var isStoreFailure: Bool {
        if case .store = self { return true }
        return false
    }
}
