/// Storage faults on demand, for tests and the simulator (`DocumentStore.Configuration
/// .faultInjector`; production leaves it nil). The store consults it around the COMMIT of every
/// write transaction after the store is open (`DocumentStore.write`); opening a file (schema and
/// metadata) is never faulted.
///
///     beforeCommit   under the store's lock, after the transaction's last statement. Throwing
///                    fails the transaction as a failed COMMIT would (an I/O error, a full
///                    disk): it rolls back and the write throws the error (an `SQLiteError`
///                    becomes `StoreError.sqlite`). The injector must not call the store here.
///     afterCommit    after the COMMIT, the store's caches updated and its lock released, before
///                    commit observers are told. Throwing makes a write that committed throw
///                    (and the observers are not told): the caller of a process killed inside
///                    its commit never learns the outcome.
///                    The injector may read the store here (the store stays consistent).
public protocol StoreFaultInjector: AnyObject, Sendable {
    /// Called just before a write transaction's COMMIT; throw to fail the transaction.
    func beforeCommit() throws
    /// Called just after a write transaction committed; throw to hide the success from its caller.
    func afterCommit() throws
}
