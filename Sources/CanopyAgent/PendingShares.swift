import CanopyCore
import CanopyReplication
import Logging
import Synchronization

/// Databases peers asked to replicate that are not shared with them (Syncthing's pending
/// folders): the peer's offer, refused with `forbidden`, is kept here until `share` accepts it
/// or the peer is removed. `db.dismiss` marks it dismissed: it is no longer listed and the
/// peer's further requests for it (a refused peer asks again and again, backing off) raise no
/// `share.pending`, until `share` accepts it or `peer.remove` forgets the peer. A peer's request
/// names only the database, so the offer is its database and peer: a request for another database
/// is another offer. Recorded from the replication queue, read from the agent's.
///
/// The offers, dismissed ones included, outlive a restart: they are written to
/// `DIR/pending-shares.json` (0600) whenever one appears, is dismissed or goes, with their
/// attempts and times as they stand then (later attempts of an offer already kept are counted in
/// memory only). A file that cannot be read is logged and the list starts empty: it is a
/// convenience, never a reason not to start.
final class PendingShares: Sendable {
    typealias Offer = PendingOffers.Offer
    typealias Recorded = PendingOffers.Recorded

    private let offers: Mutex<PendingOffers>
    private let path: String?
    private let logger: Logger

    /// The offers kept at `path` (none when `path` is nil: nothing is written).
    init(path: String?, logger: Logger) {
        self.path = path
        self.logger = logger
        offers = Mutex(PendingOffers(capacity: AgentLimits.pendingSharesMax, offers: path.map { Self.load($0, logger) } ?? [:]))
    }

    /// Records a request for a database not shared with the peer (`PendingOffers.record`).
    func record(_ key: ShareKey, at time: Double) -> Recorded {
        let recorded = offers.withLock { $0.record(key, at: time) }
        if recorded == .new { save() }
        return recorded
    }

    /// Marks a listed offer dismissed; true when there was one (a dismissed offer is not listed).
    func dismiss(_ key: ShareKey) -> Bool {
        let dismissed = offers.withLock { $0.dismiss(key) }
        if dismissed { save() }
        return dismissed
    }

    /// Forgets an offer, dismissed or not (it was shared); true when there was one.
    @discardableResult
    func remove(_ key: ShareKey) -> Bool {
        let removed = offers.withLock { $0.remove(key) }
        if removed { save() }
        return removed
    }

    /// Forgets every offer of a peer (it was removed).
    func removeAll(from nodeID: String) {
        if offers.withLock({ $0.removeAll(from: nodeID) }) { save() }
    }

    /// Every offer not dismissed, by database then node id.
    var all: [(key: ShareKey, value: Offer)] { offers.withLock { $0.listed } }

    /// Every offer, dismissed ones included, by database then node id.
    private var kept: [(key: ShareKey, value: Offer)] { offers.withLock { $0.sorted } }

    private func save() {
        guard let path else { return }
        let rows = kept.map { key, offer -> JSONValue in
            var row: [String: JSONValue] = [
                "db": .string(key.database.text), "node_id": .string(key.nodeID), "attempts": .int(Int64(offer.attempts)),
                "first_seen": .double(offer.firstSeen), "last_seen": .double(offer.lastSeen),
            ]
            if offer.dismissed { row["dismissed"] = .bool(true) }
            return .object(row)
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
            offers[ShareKey(database, nodeID)] = Offer(
                attempts: Int(attempts), firstSeen: first, lastSeen: last, dismissed: members["dismissed"] == .bool(true))
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
