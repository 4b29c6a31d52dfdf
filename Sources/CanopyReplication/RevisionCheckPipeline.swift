import CanopyStore
import CanopyWire
import DequeModule

/// Received `revisions` messages on their way to the store: each message's revisions are checked
/// (content hash, canonical form) by the worker, and the checked messages reach `deliver` in the
/// order they arrived, whatever order the checks finish in. With the inline worker a message is
/// delivered before `submit` returns, as if there were no pipeline.
///
/// Invariants: runs on the session's serial context; holds at most one entry per `revisions`
/// message received and not yet written, which the source's window bounds; entries are delivered
/// strictly in submission order.
final class RevisionCheckPipeline {
    /// One message, checked.
    struct Checked {
        let requestID: RequestID
        let final: Bool
        let result: Result<CheckedForeignBatch, StoreInputError>
    }

    private let worker: any ReplicationWorker
    private let deliver: (Checked) -> Void
    /// Submitted messages, oldest first: `nil` while the message's check runs.
    private var entries: Deque<(ticket: UInt64, checked: Checked?)> = []
    private var nextTicket: UInt64 = 0

    init(worker: any ReplicationWorker, deliver: @escaping (Checked) -> Void) {
        self.worker = worker
        self.deliver = deliver
    }

    /// True while some message is checked or waits for an older one.
    var isEmpty: Bool { entries.isEmpty }

    /// Starts checking one message's revisions.
    func submit(requestID: RequestID, final: Bool, revisions: [ForeignRevision]) {
        let ticket = nextTicket
        nextTicket += 1
        entries.append((ticket, nil))
        let handle = UnsafeHandle(self)
        worker.run({ Self.check(revisions) }) { result in
            handle.pipeline?.finished(ticket, Checked(requestID: requestID, final: final, result: result))
        }
    }

    /// The store's checks of one message; pure, so it runs on any thread.
    private static func check(_ revisions: [ForeignRevision]) -> Result<CheckedForeignBatch, StoreInputError> {
        do throws(StoreInputError) {
            return .success(try DocumentStore.checkForeign(revisions))
        } catch {
            return .failure(error)
        }
    }

    /// Records a finished check and delivers every message at the head that is ready.
    private func finished(_ ticket: UInt64, _ checked: Checked) {
        guard let index = entries.firstIndex(where: { $0.ticket == ticket }) else { return }
        entries[index].checked = checked
        while let head = entries.first, let ready = head.checked {
            entries.removeFirst()
            deliver(ready)
        }
    }

    /// Drops every message not yet delivered (the session closed: nothing more is written).
    func cancel() {
        entries.removeAll()
    }

    /// A weak reference that crosses to the worker and back: the pipeline itself is only
    /// touched on the serial context, where the completion runs.
    private final class UnsafeHandle: @unchecked Sendable {
        weak var pipeline: RevisionCheckPipeline?
        init(_ pipeline: RevisionCheckPipeline) { self.pipeline = pipeline }
    }
}
