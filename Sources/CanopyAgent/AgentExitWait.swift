#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// How a `shutdown` client knows the agent is gone (Protocol/admin-v1.md §6, `shutdown`): the
/// agent keeps the requesting connection open until its shutdown has finished, so the client
/// first waits for the end of that connection, then for the data directory's lock
/// (`canopyd.lock`, held by the agent for its whole life) to be free. Only then can a new
/// `canopyd run` on the same directory take the lock.
package enum AgentExitWait {
    /// The agent did not let go within the wait.
    public struct StillRunning: Error, CustomStringConvertible {
        /// The lock file still held.
        public var lockPath: String
        /// The seconds waited.
        public var seconds: Double

        public var description: String {
            "the agent accepted shutdown but has not exited after \(Int(seconds)) s (it still holds \(lockPath)); "
                + "see its log, or stop its process with SIGKILL"
        }
    }

    /// Waits until `client`'s connection is closed by the agent and `lockPath` can be locked,
    /// at most `seconds` in all.
    public static func wait(for client: AdminSocketClient, lockPath: String, seconds: Double) throws(StillRunning) {
        let deadline = monotonicSeconds() + seconds
        client.waitUntilClosed(deadline: deadline)
        while !lockIsFree(lockPath) {
            guard monotonicSeconds() < deadline else { throw StillRunning(lockPath: lockPath, seconds: seconds) }
            usleep(10_000)
        }
    }

    /// Whether no process holds the flock on `path`: it is taken shared and at once released
    /// (a missing file holds no lock). A `canopyd run` trying its exclusive lock in that
    /// microsecond would be refused, which is why this is used only after a shutdown.
    public static func lockIsFree(_ path: String) -> Bool {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return errno == ENOENT }
        defer { close(fd) }
        guard flock(fd, LOCK_SH | LOCK_NB) == 0 else { return false }
        flock(fd, LOCK_UN)
        return true
    }

    static func monotonicSeconds() -> Double {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
    }
}
