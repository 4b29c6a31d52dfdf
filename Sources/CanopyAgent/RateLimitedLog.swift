import Foundation
import Logging

/// A `Logger` whose lines go through a `LogRateLimiter`: for lines that a remote peer or a local
/// client can trigger at will (a refused connection, a garbage handshake, an over-long admin
/// line), so that a flood of them writes a few lines a minute instead of one per connection.
/// A line that goes out after others of its kind were held back carries their number as
/// `similar_lines_suppressed`; `reportSuppressed` writes the counts still held (at shutdown).
///
/// Thread-safe: connections log from their own queues, so a lock guards the limiter.
final class RateLimitedLog: @unchecked Sendable {
    private let logger: Logger
    private let lock = NSLock()
    private var limiter: LogRateLimiter

    init(logger: Logger, intervalSeconds: Double = AgentLimits.repeatedWarningIntervalSeconds) {
        self.logger = logger
        limiter = LogRateLimiter(intervalSeconds: intervalSeconds)
    }

    /// Logs `message` at `level` unless a line of `kind` went out less than the interval ago.
    /// The message is built only when it is written.
    func log(_ level: Logger.Level, kind: String, _ message: @autoclosure () -> Logger.Message) {
        // Lines the logger would drop anyway are neither counted nor reported.
        guard logger.logLevel <= level else { return }
        let decision = lock.withLock { limiter.admit(kind, now: monotonicNow().seconds) }
        guard case .log(let suppressed) = decision else { return }
        let metadata: Logger.Metadata? = suppressed > 0 ? ["similar_lines_suppressed": "\(suppressed)"] : nil
        logger.log(level: level, message(), metadata: metadata)
    }

    /// Writes one line per kind whose lines were held back since its last line, with their number.
    func reportSuppressed() {
        let held = lock.withLock { limiter.drain() }
        for (kind, count) in held {
            logger.notice("lines held back by the log rate limit", metadata: ["kind": "\(kind)", "similar_lines_suppressed": "\(count)"])
        }
    }
}

extension Duration {
    /// The duration in seconds, as the rate limiter's clock.
    var seconds: Double {
        let (whole, attoseconds) = components
        return Double(whole) + Double(attoseconds) / 1e18
    }
}
