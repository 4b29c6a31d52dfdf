import CanopyCore
import Logging
import Synchronization

/// Databases peers asked to replicate that are not shared with them (Syncthing's pending
/// folders): the peer's offer, refused with `forbidden`, is kept here until `share` accepts it,
/// `db.dismiss` drops it or the peer is removed. Recorded from the replication queue, read from
/// the agent's.
///
/// The offers outlive a restart: they are written to `DIR/pending-shares.json` (0600) whenever
/// one appears or goes, with their attempts and times as they stand then (later attempts of an
/// offer already listed are counted in memory only). A file that cannot be read is logged and the
/// list starts empty: it is a convenience, never a reason not to start.
final class PendingShares: Sendable {
    struct Offer: Sendable, Equatable {
        var attempts: Int
        var firstSeen: Double
        var lastSeen: Double
    }

    private let offers: Mutex<[ShareKey: Offer]>
    private let path: String?
    private let logger: Logger

    /// The offers kept at `path` (none when `path` is nil: nothing is written).
    init(path: String?, logger: Logger) {
        self.path = path
        self.logger = logger
        offers = Mutex(path.map { Self.load($0, logger) } ?? [:])
    }

    /// Records an offer; true when it is new (the agent then emits `share.pending`). At most
    /// `AgentLimits.pendingSharesMax` are kept: the one seen least recently makes room.
    func record(_ key: ShareKey, at time: Double) -> Bool {
        let added = offers.withLock { offers in
            if var offer = offers[key] {
                offer.attempts += 1
                offer.lastSeen = time
                offers[key] = offer
                return false
            }
            if offers.count >= AgentLimits.pendingSharesMax, let oldest = offers.min(by: { $0.value.lastSeen < $1.value.lastSeen })?.key {
                offers[oldest] = nil
            }
            offers[key] = Offer(attempts: 1, firstSeen: time, lastSeen: time)
            return true
        }
        if added { save() }
        return added
    }

    /// Forgets an offer; true when there was one.
    @discardableResult
    func remove(_ key: ShareKey) -> Bool {
        let removed = offers.withLock { $0.removeValue(forKey: key) != nil }
        if removed { save() }
        return removed
    }

    /// Forgets every offer of a peer (it was removed).
    func removeAll(from nodeID: String) {
        let removed = offers.withLock { offers in
            let before = offers.count
            offers = offers.filter { $0.key.nodeID != nodeID }
            return offers.count != before
        }
        if removed { save() }
    }

    /// Every offer, by database then node id.
    var all: [(key: ShareKey, value: Offer)] {
        offers.withLock { $0.sorted { ($0.key.database, $0.key.nodeID) < ($1.key.database, $1.key.nodeID) } }
    }

    private func save() {
        guard let path else { return }
        let rows = all.map { key, offer -> JSONValue in
            .object([
                "db": .string(key.database.text), "node_id": .string(key.nodeID), "attempts": .int(Int64(offer.attempts)),
                "first_seen": .double(offer.firstSeen), "last_seen": .double(offer.lastSeen),
            ])
        }
        do throws(AgentError) {
            try DataDirectory.writeFileAtomically(path, CanonicalJSON.encode(.array(rows)), mode: 0o600)
        } catch {
            logger.warning("could not write the pending database offers", metadata: ["path": "\(path)", "error": "\(error)"])
        }
    }

    private static func load(_ path: String, _ logger: Logger) -> [ShareKey: Offer] {
        guard let bytes = try? DataDirectory.readFile(path, limit: 4 << 20) else { return [:] }
        guard case .array(let rows)? = try? JSONValue.parse(bytes) else {
            logger.warning("ignoring the pending database offers: \(path) is not a JSON array")
            return [:]
        }
        var offers: [ShareKey: Offer] = [:]
        for row in rows.prefix(AgentLimits.pendingSharesMax) {
            guard let members = row.objectValue, case .string(let name)? = members["db"], let database = DatabaseName(validating: name),
                case .string(let nodeID)? = members["node_id"], case .int(let attempts)? = members["attempts"],
                let first = members["first_seen"]?.number, let last = members["last_seen"]?.number
            else { continue }
            offers[ShareKey(database, nodeID)] = Offer(attempts: Int(attempts), firstSeen: first, lastSeen: last)
        }
        return offers
    }
}

extension JSONValue {
    /// An integer or a double as a double.
    fileprivate var number: Double? {
        switch self {
        case .int(let value): Double(value)
        case .double(let value): value
        default: nil
        }
    }
}
