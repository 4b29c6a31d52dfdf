/// Exponential backoff with jitter for reconnecting to unreachable peers (`Protocol/design.md` §4.4).
///
/// The n-th delay is `min(maximum, initial × 2ⁿ)` scaled by a random factor in
/// [1 − jitter, 1 + jitter), so peers that lost a common neighbour at the same moment do not all
/// redial it in lockstep. A successful connection calls `reset()`.
public struct Backoff: Sendable, Equatable {
    /// The first delay, in seconds.
    public var initialSeconds: Double
    /// The largest delay, in seconds (before jitter).
    public var maximumSeconds: Double
    /// The jitter fraction, in [0, 1).
    public var jitter: Double
    /// Failed attempts since the last success.
    public private(set) var attempts: Int = 0

    /// Creates a backoff schedule.
    public init(initialSeconds: Double = 0.5, maximumSeconds: Double = 60, jitter: Double = 0.5) {
        precondition(initialSeconds > 0 && maximumSeconds >= initialSeconds && (0..<1).contains(jitter))
        self.initialSeconds = initialSeconds
        self.maximumSeconds = maximumSeconds
        self.jitter = jitter
    }

    /// The delay before the next attempt; counts the attempt. `unit` is a uniform random in [0, 1).
    public mutating func nextDelay(unit: Double) -> Double {
        let exponent = Double(min(attempts, 62))
        attempts += 1
        let base = min(maximumSeconds, initialSeconds * pow2(exponent))
        return base * (1 - jitter + 2 * jitter * unit)
    }

    /// Forgets past failures (after a successful connection).
    public mutating func reset() {
        attempts = 0
    }

    private func pow2(_ exponent: Double) -> Double {
        var result = 1.0
        var remaining = exponent
        while remaining > 0 && result < 1e300 {
            result *= 2
            remaining -= 1
        }
        return result
    }
}
