import CSQLite

/// SQLite settings that belong to the whole process rather than to one connection. Only a
/// program that owns its process (the agent, the benchmarks) should call these; a library
/// embedded in an application leaves the application's SQLite as it found it.
extension Database {
    /// Turns off SQLite's memory statistics (`SQLITE_CONFIG_MEMSTATUS`) for the whole process.
    ///
    /// Why: with statistics on, every SQLite allocation and free takes one global mutex to
    /// update the counters, even on connections opened without mutexes. Replication allocates
    /// inside SQLite several times per document (a body read across pages, each statement's
    /// step); with the two agents of `canopy-bench replicate` running with statistics off, the
    /// sending agent's CPU per 100k documents fell by about 8% and the receiver's by 2–3%.
    /// The cost: `sqlite3_memory_used()` and its high-water mark read 0, which Canopy never uses.
    ///
    /// SQLite accepts the setting only before its first use in the process. Returns true when it
    /// took effect; false, changing nothing, once SQLite is initialised (a connection was opened
    /// or someone else called `sqlite3_initialize`).
    @discardableResult
    package static func disableMemoryStatistics() -> Bool {
        canopy_sqlite3_config_memstatus(0) == SQLITE_OK
    }
}
