/// Keeps repetitive warnings from flooding the log: at most one line per kind per
/// `intervalSeconds`; the lines held back are counted and reported with the next line of that
/// kind that goes out ("N similar suppressed").
///
/// Pure (time is passed in); kinds are whatever strings the caller uses, e.g. `rejected:PEER`.
/// At most `kindsMax` kinds are tracked: beyond that the oldest is forgotten, so a flood of
/// distinct kinds costs bounded memory.
struct LogRateLimiter {
    /// What `admit` decided.
    enum Decision: Equatable {
        /// Log the line; `suppressed` similar lines were held back since the last one.
        case log(suppressed: Int)
        /// Hold this line back (it is counted).
        case suppress
    }

    let intervalSeconds: Double
    let kindsMax: Int
    private var kinds: [String: (lastLogged: Double, suppressed: Int)] = [:]

    init(intervalSeconds: Double = 10, kindsMax: Int = 256) {
        self.intervalSeconds = intervalSeconds
        self.kindsMax = kindsMax
    }

    /// Whether a line of `kind` at `now` should be written.
    mutating func admit(_ kind: String, now: Double) -> Decision {
        if let entry = kinds[kind] {
            guard now - entry.lastLogged >= intervalSeconds else {
                kinds[kind]!.suppressed += 1
                return .suppress
            }
            kinds[kind] = (now, 0)
            return .log(suppressed: entry.suppressed)
        }
        if kinds.count >= kindsMax, let oldest = kinds.min(by: { $0.value.lastLogged < $1.value.lastLogged })?.key {
            kinds[oldest] = nil
        }
        kinds[kind] = (now, 0)
        return .log(suppressed: 0)
    }

    /// The kinds with lines held back and how many, oldest kind first; their counts start again
    /// at zero. Called when the log is about to end (shutdown), so no held-back count is lost.
    mutating func drain() -> [(kind: String, suppressed: Int)] {
        let held = kinds.filter { $0.value.suppressed > 0 }.sorted { ($0.value.lastLogged, $0.key) < ($1.value.lastLogged, $1.key) }
        for (kind, _) in held { kinds[kind]!.suppressed = 0 }
        return held.map { ($0.key, $0.value.suppressed) }
    }
}
