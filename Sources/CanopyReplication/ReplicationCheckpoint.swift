import CanopyCore

/// A replication checkpoint as each side stores it (in a local document that never replicates):
/// the last source sequence known to be durably written on the target in the current session,
/// and a short history of earlier sessions (CouchDB's replication log).
///
/// The target writes its checkpoint in the same transaction as the batch it completes, and the
/// source writes its own only after the target acknowledged the batch, so neither is ever ahead of
/// durable data. The two sides can still differ (an acknowledgement lost with the connection);
/// `startSequence` picks the newest sequence both agree is safe.
package struct ReplicationCheckpoint: Codable, Equatable, Sendable {
    /// One session's last recorded sequence.
    public struct Entry: Codable, Equatable, Sendable {
        /// The session id (random, made when a replication session starts).
        public var session: String
        /// The source sequence recorded for that session.
        public var sequence: UInt64

        /// Creates an entry.
        public init(session: String, sequence: UInt64) {
            self.session = session
            self.sequence = sequence
        }
    }

    /// How many past sessions a checkpoint remembers (PouchDB keeps 5).
    public static let historyMax = 5

    /// The current session and its sequence.
    public var current: Entry
    /// Earlier sessions, newest first, at most `historyMax`.
    public var history: [Entry]

    /// Creates a checkpoint.
    public init(current: Entry, history: [Entry] = []) {
        self.current = current
        self.history = Array(history.prefix(ReplicationCheckpoint.historyMax))
    }

    /// Records `sequence` for `session`, pushing the previous session into the history when the
    /// session changes.
    public func recording(session: String, sequence: UInt64) -> ReplicationCheckpoint {
        if session == current.session {
            return ReplicationCheckpoint(current: Entry(session: session, sequence: sequence), history: history)
        }
        return ReplicationCheckpoint(current: Entry(session: session, sequence: sequence), history: [current] + history)
    }

    /// All entries, newest first.
    public var entries: [Entry] { [current] + history }

    /// The sequence to resume from, given both sides' checkpoints (CouchDB's "compare replication
    /// logs"): the newest session both sides recorded, at the lower of the two sequences recorded
    /// for it; 0 (a full replication) when there is none.
    public static func startSequence(local: ReplicationCheckpoint?, remote: ReplicationCheckpoint?) -> UInt64 {
        guard let local, let remote else { return 0 }
        let remoteBySession = Dictionary(remote.entries.map { ($0.session, $0.sequence) }, uniquingKeysWith: { first, _ in first })
        for entry in local.entries {
            if let other = remoteBySession[entry.session] { return min(entry.sequence, other) }
        }
        return 0
    }

    /// The checkpoint as a JSON object (the body of its local document).
    public var json: JSONValue {
        func json(_ entry: Entry) -> JSONValue {
            .object(["session": .string(entry.session), "seq": .int(Int64(bitPattern: entry.sequence))])
        }
        return .object(["current": json(current), "history": .array(history.map(json))])
    }

    /// The checkpoint as canonical JSON bytes (the value `checkpoint`/`checkpointSet` carry).
    public func encoded() -> [UInt8] {
        CanonicalJSON.encode(json)
    }

    /// Reads a checkpoint from the JSON `json` produces; nil for anything else (a corrupt
    /// checkpoint means a full replication, never a wrong resume point).
    public init?(json: JSONValue?) {
        guard case .object(let members)? = json else { return nil }
        func entry(_ value: JSONValue?) -> Entry? {
            guard case .object(let fields)? = value, case .string(let session)? = fields["session"],
                case .int(let sequence)? = fields["seq"], sequence >= 0
            else { return nil }
            return Entry(session: session, sequence: UInt64(sequence))
        }
        guard let current = entry(members["current"]), case .array(let items)? = members["history"] else { return nil }
        let history = items.compactMap(entry)
        guard history.count == items.count else { return nil }
        self.init(current: current, history: history)
    }

    /// Reads a checkpoint written by `encoded()`; nil for anything else.
    public init?(encoded bytes: some Collection<UInt8>) {
        self.init(json: try? JSONValue.parse(Array(bytes)))
    }
}
