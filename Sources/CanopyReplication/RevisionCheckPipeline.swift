import CanopyStore
import CanopyWire
import DequeModule
import Synchronization

/// Received `revisions` messages on their way to the store: each message's revisions are checked
/// (content hash, canonical form) by the worker, and the checked messages reach `deliver` in the
/// order they arrived, whatever order the checks finish in. With the inline worker a message is
/// delivered before `submit` returns, as if there were no pipeline.
///
/// `deliver` gets every message at the head that is ready, oldest first, so that messages that
/// queued up while the writer was busy are written in one transaction. A finished check leaves its
/// result in `finished` from the worker's thread before its completion is queued on the serial
/// context: when the first of several queued completions runs, the later results are already
/// there, and one delivery takes them all.
///
/// Invariants: `entries` is touched only on the session's serial context; it holds at most one
/// entry per `revisions` message received and not yet written, which the source's window bounds;
/// entries are delivered strictly in submission order, each exactly once.
final class RevisionCheckPipeline {
    /// One message, checked.
    struct Checked: Sendable {
        let requestID: RequestID
        let final: Bool
        let result: Result<CheckedForeignBatch, StoreInputError>
    }

    private let worker: any ReplicationWorker
    /// Where checked messages go, in arrival order (set by the owner after it is made).
    var deliver: ([Checked]) -> Void = { _ in }
    /// Submitted messages, oldest first: `nil` until the message's result was collected.
    private var entries: Deque<(ticket: UInt64, checked: Checked?)> = []
    private var nextTicket: UInt64 = 0
    /// Results the worker finished and the serial context has not collected yet, by ticket.
    private let finished = Finished()

    init(worker: any ReplicationWorker) {
        self.worker = worker
    }

    /// True while some message is checked or waits for an older one.
    var isEmpty: Bool { entries.isEmpty }

    /// Starts checking one message's revisions.
    func submit(requestID: RequestID, final: Bool, revisions: [ForeignRevision]) {
        let ticket = nextTicket
        nextTicket += 1
        entries.append((ticket, nil))
        let handle = UnsafeHandle(self)
        let finished = self.finished
        worker.run({
            finished.put(ticket, Checked(requestID: requestID, final: final, result: Self.check(revisions)))
        }) { _ in
            handle.pipeline?.collect()
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

    /// Records every finished check and delivers the messages at the head that are ready.
    private func collect() {
        for (ticket, checked) in finished.takeAll() {
            guard let index = entries.firstIndex(where: { $0.ticket == ticket }) else { continue }
            entries[index].checked = checked
        }
        var ready: [Checked] = []
        while let head = entries.first, let checked = head.checked {
            entries.removeFirst()
            ready.append(checked)
        }
        if !ready.isEmpty { deliver(ready) }
    }

    /// Drops every message not yet delivered (the session closed: nothing more is written).
    func cancel() {
        entries.removeAll()
        _ = finished.takeAll()
    }

    /// Checked messages handed from the worker's thread to the serial context.
    private final class Finished: Sendable {
        private let results = Mutex<[(UInt64, Checked)]>([])

        func put(_ ticket: UInt64, _ checked: Checked) {
            results.withLock { $0.append((ticket, checked)) }
        }

        func takeAll() -> [(UInt64, Checked)] {
            results.withLock { results in
                defer { results = [] }
                return results
            }
        }
    }

    /// A weak reference that crosses to the worker and back: the pipeline itself is only
    /// touched on the serial context, where the completion runs.
    private final class UnsafeHandle: @unchecked Sendable {
        weak var pipeline: RevisionCheckPipeline?
        init(_ pipeline: RevisionCheckPipeline) { self.pipeline = pipeline }
    }
}
