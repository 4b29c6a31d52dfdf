import Foundation

/// A registration of a commit observer; `cancel()` removes it.
public final class StoreObserverToken: @unchecked Sendable {
    private weak var observers: CommitObservers?
    private let id: Int

    fileprivate init(observers: CommitObservers, id: Int) {
        self.observers = observers
        self.id = id
    }

    /// Stops the notifications. Safe to call more than once.
    public func cancel() {
        observers?.remove(id)
    }

    deinit { cancel() }
}

/// The set of commit observers of one store.
final class CommitObservers: @unchecked Sendable {
    private let lock = NSLock()
    private var nextID = 0
    private var handlers: [Int: @Sendable () -> Void] = [:]

    fileprivate func add(_ handler: @escaping @Sendable () -> Void) -> Int {
        lock.lock()
        defer { lock.unlock() }
        nextID += 1
        handlers[nextID] = handler
        return nextID
    }

    fileprivate func remove(_ id: Int) {
        lock.lock()
        defer { lock.unlock() }
        handlers[id] = nil
    }

    /// The handlers, in registration order.
    fileprivate var snapshot: [@Sendable () -> Void] {
        lock.lock()
        defer { lock.unlock() }
        return handlers.keys.sorted().map { handlers[$0]! }
    }
}

extension DocumentStore {
    /// Calls `handler` after every transaction that changed the changes feed (a local write, a
    /// foreign insert, a resolution), on the committing thread, after the store's lock is released.
    /// Continuous replication uses it to push new changes at once, with no polling. The handler
    /// must be quick (hop to a queue); it may call back into the store.
    public func addCommitObserver(_ handler: @escaping @Sendable () -> Void) -> StoreObserverToken {
        StoreObserverToken(observers: observers, id: observers.add(handler))
    }

    func notifyCommitObservers() {
        for handler in observers.snapshot { handler() }
    }
}
