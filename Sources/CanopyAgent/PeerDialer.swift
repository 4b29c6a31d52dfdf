import CanopyReplication
import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Dials one peer: a non-blocking connect(2) whose completion a Dispatch write source reports,
/// retried with exponential backoff and jitter (`Backoff`) until it succeeds, then idle until the
/// session ends (`failed()`), when it starts again.
///
/// Invariants (all on `queue`, the manager's): at most one attempt or one timer is outstanding;
/// after `cancel()` nothing is scheduled and no descriptor is left open.
final class PeerDialer: @unchecked Sendable {
    let nodeID: String
    let address: HostPort
    private let queue: DispatchQueue
    private let logger: Logger
    private let onConnected: (Int32) -> Void
    private var backoff = Backoff(
        initialSeconds: AgentLimits.dialBackoffInitialSeconds, maximumSeconds: AgentLimits.dialBackoffMaximumSeconds,
        jitter: AgentLimits.dialBackoffJitter)
    private var timer: (any DispatchSourceTimer)?
    private var attempt: (fd: Int32, source: any DispatchSourceWrite, timeout: any DispatchSourceTimer)?
    private var cancelled = false
    private var generator = SystemRandomNumberGenerator()

    init(nodeID: String, address: HostPort, queue: DispatchQueue, logger: Logger, onConnected: @escaping (Int32) -> Void) {
        self.nodeID = nodeID
        self.address = address
        self.queue = queue
        self.logger = logger
        self.onConnected = onConnected
    }

    /// Schedules the next attempt `seconds` from now.
    func schedule(after seconds: Double) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !cancelled, timer == nil, attempt == nil else { return }
        let source = DispatchSource.makeTimerSource(queue: queue)
        source.schedule(deadline: .now() + seconds)
        source.setEventHandler { [weak self] in
            self?.timer?.cancel()
            self?.timer = nil
            self?.connect()
        }
        timer = source
        source.resume()
    }

    /// The session was established: forget past failures.
    func succeeded() {
        backoff.reset()
    }

    /// The attempt or the session failed: try again after the next backoff delay.
    func failed() {
        dispatchPrecondition(condition: .onQueue(queue))
        let unit = Double(generator.next() >> 11) * 0x1p-53
        let delay = backoff.nextDelay(unit: unit)
        logger.debug("redialling \(nodeID) at \(address) in \(delay) s")
        schedule(after: delay)
    }

    /// Stops dialling for good.
    func cancel() {
        dispatchPrecondition(condition: .onQueue(queue))
        cancelled = true
        timer?.cancel()
        timer = nil
        abandonAttempt()
    }

    private func connect() {
        guard !cancelled else { return }
        let fd: Int32
        do throws(AgentError) {
            fd = try startConnect()
        } catch {
            logger.info("cannot dial \(nodeID) at \(address): \(error)")
            return failed()
        }
        let source = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
        let timeout = DispatchSource.makeTimerSource(queue: queue)
        source.setEventHandler { [weak self] in self?.connectFinished() }
        timeout.setEventHandler { [weak self] in
            self?.logger.info("dialling \(self?.nodeID ?? "") timed out")
            self?.abandonAttempt()
            self?.failed()
        }
        timeout.schedule(deadline: .now() + AgentLimits.dialTimeoutSeconds)
        attempt = (fd, source, timeout)
        source.resume()
        timeout.resume()
    }

    /// Starts a non-blocking connect to the first resolved address.
    private func startConnect() throws(AgentError) -> Int32 {
        guard let target = try Socket.resolve(address, passive: false).first else { throw .badAddress("no address for \(address)") }
        let fd = socket(target.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw .system(SystemError("socket")) }
        var storage = target.storage
        let status = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, target.length) }
        }
        guard status == 0 || errno == EINPROGRESS else {
            let error = SystemError("connect", address.description)
            close(fd)
            throw .system(error)
        }
        return fd
    }

    private func connectFinished() {
        guard let current = attempt else { return }
        var code: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(current.fd, SOL_SOCKET, SO_ERROR, &code, &length)
        let fd = fcntl(current.fd, F_DUPFD_CLOEXEC, 0)  // the write source closes its own descriptor
        abandonAttempt()
        guard code == 0, fd >= 0 else {
            if fd >= 0 { close(fd) }
            logger.info("dialling \(nodeID) at \(address) failed: \(SystemError("connect", code: code))")
            return failed()
        }
        onConnected(fd)
    }

    private func abandonAttempt() {
        guard let current = attempt else { return }
        attempt = nil
        current.timeout.cancel()
        let fd = current.fd
        current.source.setCancelHandler { close(fd) }
        current.source.cancel()
    }
}
