import Dispatch

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One outbound TCP connection attempt: a non-blocking connect(2) whose completion a Dispatch
/// write source reports, bounded by `AgentLimits.dialTimeoutSeconds`. Retrying is the caller's
/// business (the replication engine's `PeerReplicator` backs off with jitter).
///
/// Invariants (on `queue`): `completion` runs exactly once, on `queue`; no descriptor leaks on
/// any path; the connected descriptor handed out is non-blocking and close-on-exec.
final class TCPConnector: @unchecked Sendable {
    typealias Completion = (Result<Int32, AgentError>) -> Void

    private let queue: DispatchQueue
    private var completion: Completion?
    private var fd: Int32 = -1
    private var source: (any DispatchSourceWrite)?
    private var timeout: (any DispatchSourceTimer)?

    /// Starts connecting to `address`; `completion` gets the descriptor or the error.
    static func connect(to address: HostPort, queue: DispatchQueue, completion: @escaping Completion) {
        let connector = TCPConnector(queue: queue, completion: completion)
        queue.async { connector.start(address) }
    }

    private init(queue: DispatchQueue, completion: @escaping Completion) {
        self.queue = queue
        self.completion = completion
    }

    private func start(_ address: HostPort) {
        do throws(AgentError) {
            fd = try Self.startConnect(address)
        } catch {
            return finish(.failure(error))
        }
        let write = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
        // The sources hold the connector until one of them fires.
        write.setEventHandler { [self] in connectFinished(address) }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.setEventHandler { [self] in
            finish(.failure(.system(SystemError("connect (timed out)", address.description, code: ETIMEDOUT))))
        }
        timer.schedule(deadline: .now() + AgentLimits.dialTimeoutSeconds)
        source = write
        timeout = timer
        write.resume()
        timer.resume()
    }

    /// Starts a non-blocking connect to the first resolved address.
    private static func startConnect(_ address: HostPort) throws(AgentError) -> Int32 {
        guard let target = try Socket.resolve(address, passive: false).first else { throw .badAddress("no address for \(address)") }
        let fd = socket(target.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw .system(SystemError("socket")) }
        var storage = target.storage
        let status = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, target.length) }
        }
        guard status == 0 || errno == EINPROGRESS else {
            let error = SystemError("connect to", address.description)
            close(fd)
            throw .system(error)
        }
        return fd
    }

    private func connectFinished(_ address: HostPort) {
        var code: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &code, &length)
        guard code == 0 else {
            return finish(.failure(.system(SystemError("connect to", address.description, code: code))))
        }
        // The write source owns `fd` and closes it when cancelled; hand out a duplicate.
        let connected = fcntl(fd, F_DUPFD_CLOEXEC, 0)
        guard connected >= 0 else { return finish(.failure(.system(SystemError("dup")))) }
        finish(.success(connected))
    }

    private func finish(_ result: Result<Int32, AgentError>) {
        guard let completion else { return }
        self.completion = nil
        timeout?.cancel()
        timeout = nil
        if let source {
            let fd = self.fd
            source.setCancelHandler { close(fd) }
            source.cancel()
        } else if fd >= 0 {
            close(fd)
        }
        source = nil
        completion(result)
    }
}
