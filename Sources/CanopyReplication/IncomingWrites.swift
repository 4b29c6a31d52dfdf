import CanopyStore
import CanopyWire
import DequeModule

/// The incoming-write pipeline's queue and its one invariant: **one write in flight**, because
/// the checkpoint a write records depends on which batches the write before it completed.
///
/// Received `revisions` messages are checked off the serial context (`RevisionCheckPipeline`)
/// and arrive here in arrival order. `nextWrite()` hands out the next transaction's messages —
/// those that queued up while the writer was busy go together, up to `revisionsMax` revisions —
/// only when no write is in flight; `writeFinished()` makes room for the next. A message whose
/// check failed as a whole is handed out alone, once the messages before it were written, so the
/// session can treat it as the protocol violation it is.
///
/// A pure value: no store, no queue; the session runs the writes (`SubscriptionTarget.Write`).
struct IncomingWrites {
    /// What to write next.
    enum Next {
        /// Nothing to do now: the queue is empty or a write is in flight.
        case none
        /// A message whose revisions failed their check as a whole (the head of the queue).
        case failed(RequestID, StoreInputError)
        /// Checked messages for one transaction, in arrival order.
        case write([SubscriptionTarget.CheckedMessage])
        /// No message is queued; batches that needed nothing may still have a checkpoint to
        /// write (`SubscriptionTarget.prepareWrite` decides).
        case checkpointOnly
    }

    /// Most revisions in one transaction.
    let revisionsMax: Int
    private var unwritten: Deque<RevisionCheckPipeline.Checked> = []
    /// True while a write is with the writer.
    private(set) var writing = false

    init(revisionsMax: Int = SubscriptionTarget.writeGroupRevisionsMax) {
        self.revisionsMax = revisionsMax
    }

    /// Messages checked and not yet handed out.
    var queued: Int { unwritten.count }

    /// Checked messages arrived, in arrival order.
    mutating func append(_ checked: [RevisionCheckPipeline.Checked]) {
        unwritten.append(contentsOf: checked)
    }

    /// The next transaction's messages, unless a write is in flight. The session calls
    /// `writeStarted()` when it hands the write to the writer.
    mutating func nextWrite() -> Next {
        guard !writing else { return .none }
        if let head = unwritten.first, case .failure(let problem) = head.result { return .failed(head.requestID, problem) }
        var messages: [SubscriptionTarget.CheckedMessage] = []
        var revisions = 0
        while let head = unwritten.first, case .success(let batch) = head.result,
            messages.isEmpty || revisions + batch.count <= revisionsMax {
            unwritten.removeFirst()
            messages.append(.init(requestID: head.requestID, final: head.final, batch: batch))
            revisions += batch.count
        }
        return messages.isEmpty ? .checkpointOnly : .write(messages)
    }

    /// The session handed a write to the writer (messages, or a checkpoint alone).
    mutating func writeStarted() {
        precondition(!writing, "one write in flight")
        writing = true
    }

    /// The writer finished the write in flight.
    mutating func writeFinished() {
        precondition(writing, "no write in flight")
        writing = false
    }

    /// The session ended: what was not written is dropped (the peer sends it again next time).
    mutating func removeAll() {
        unwritten.removeAll()
    }
}
