import CanopyCore
import CanopyStore
import Dispatch
import Synchronization

extension Database {
    /// The changes feed as an `AsyncSequence`: every document changed after `since`, each once at
    /// its latest change, in sequence order; then each change as it is committed (local saves,
    /// revisions from peers, resolutions), until the task iterating it is cancelled (the sequence
    /// then ends) or a read fails (it throws). `since: 0` starts with every document; `lastSequence`
    /// starts with what is still to come.
    ///
    /// A document changed several times while the consumer is busy is delivered once, at its
    /// latest change: the feed is re-read from the last sequence delivered, never buffered, so a
    /// slow consumer costs no memory.
    public func changes(since: Int64 = 0) -> Changes {
        Changes(store: store, queue: queue, since: since)
    }

    /// The changes feed of a database (`Database.changes(since:)`).
    ///
    /// Data model: the feed is the store's `documents` rows ordered by sequence, each row holding
    /// a document's latest change. An iterator holds the last sequence it delivered, at most one
    /// page of rows read ahead (`pageSize`), and one flag set by the store's commit observer. It
    /// reads the next page when its page is used up; when the feed has nothing more, it waits for
    /// the flag. The observer is registered before the first read, and the flag is cleared only
    /// by the wait that consumes it, so a commit that lands between a read and the wait is never
    /// missed: the wait returns at once and the feed is read again.
    public struct Changes: AsyncSequence, Sendable {
        public typealias Element = Change
        public typealias Failure = DatabaseError

        /// How many changes an iterator reads ahead in one query: the most it holds at once.
        static let pageSize = 100

        let store: DocumentStore
        /// Where the pages are read: the database's queue, off the cooperative pool.
        let queue: DispatchQueue
        let since: Int64

        /// Starts reading the feed; the iterator stops observing commits when it is released.
        public func makeAsyncIterator() -> Iterator {
            Iterator(store: store, queue: queue, since: since)
        }

        /// Reads the feed page by page and waits for commits at its end.
        public struct Iterator: AsyncIteratorProtocol {
            public typealias Element = Change
            public typealias Failure = DatabaseError

            private let store: DocumentStore
            private let queue: DispatchQueue
            private let signal = CommitSignal()
            /// Keeps the commit observer registered while the iterator lives; releasing it cancels.
            private let observation: StoreObserverToken
            /// The sequence of the last row read: where the next page starts.
            private var position: Int64
            /// Changes read but not yet delivered, in sequence order; at most `pageSize`.
            private var pending: ArraySlice<Change> = []

            init(store: DocumentStore, queue: DispatchQueue, since: Int64) {
                self.store = store
                self.queue = queue
                position = since
                let signal = self.signal
                observation = store.addCommitObserver { signal.raise() }
            }

            /// The next change; nil once the task is cancelled. Runs on the caller's actor; each
            /// page is read on the database's queue, so no thread of the cooperative pool waits
            /// for SQLite, and the iterator itself is never sent elsewhere.
            public mutating func next(isolation actor: isolated (any Actor)?) async throws(DatabaseError) -> Change? {
                while !Task.isCancelled {
                    if let change = pending.popFirst() { return change }
                    let page = try await Self.readPage(of: store, on: queue, since: position)
                    if let last = page.lastSequence { position = last }
                    pending = page.changes[...]
                    // A page of only damaged rows still moves `position`: read on without waiting.
                    if pending.isEmpty && page.lastSequence == nil { await signal.wait() }
                }
                return nil
            }

            /// The page of the feed after `since`, read on `queue`.
            private static func readPage(of store: DocumentStore, on queue: DispatchQueue, since: Int64) async throws(DatabaseError) -> ChangesPage {
                let result = await withCheckedContinuation { (done: CheckedContinuation<Result<ChangesPage, DatabaseError>, Never>) in
                    queue.async {
                        done.resume(returning: Result { () throws(DatabaseError) -> ChangesPage in
                            do throws(StoreError) { return try store.changesPage(since: since, limit: Changes.pageSize) } catch {
                                throw DatabaseError(error, documentID: nil)
                            }
                        })
                    }
                }
                return try result.get()
            }

            /// As `next(isolation:)`, off any actor.
            public mutating func next() async throws(DatabaseError) -> Change? {
                try await next(isolation: nil)
            }
        }
    }
}

/// A flag raised by the store's commit observer and consumed by the iterator waiting for it: at
/// most one waiter and one pending notification, whatever the number of commits.
final class CommitSignal: Sendable {
    private struct State {
        var raised = false
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex(State())

    /// Records a commit and wakes the waiter, if any.
    func raise() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.raised = true
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Returns once a commit has happened since the last wait returned, or the task is cancelled.
    func wait() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    if state.raised || Task.isCancelled {
                        state.raised = false
                        return true
                    }
                    state.waiter = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume()
        }
    }
}
