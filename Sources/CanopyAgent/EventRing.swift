import CanopyCore
import CanopyReplication

/// An agent event as the admin socket streams it: `{"seq":N,"type":"…","time":…,"data":{…}}`.
///
/// A replication batch records one event per document, most of which no client ever reads, so a
/// document event keeps the engine's `DocumentEvent` as it came and builds its `type` and `data`
/// only when they are read (`content`); two events are equal when their JSON forms are.
public struct AgentEvent: Sendable, Equatable {
    /// What an event holds before it is rendered.
    public enum Content: Sendable {
        /// An event built by the agent with its data already in JSON form.
        case fields(type: String, data: [String: JSONValue])
        /// A replication document event concerning the peer `nodeID`.
        case document(nodeID: String, event: DocumentEvent)

        /// The kind, e.g. `document.pulled`.
        public var type: String {
            switch self {
            case .fields(let type, _): type
            case .document(_, let event): Self.documentEventTypes[event.kind]!
            }
        }

        /// Details, rendered now for a document event.
        public var data: [String: JSONValue] {
            switch self {
            case .fields(_, let data):
                return data
            case .document(let nodeID, let event):
                var data: [String: JSONValue] = ["node_id": .string(nodeID), "doc": .string(event.documentID)]
                if let revision = event.revision { data["rev"] = .string(revision.description) }
                if let detail = event.detail { data["detail"] = .string(detail) }
                return data
            }
        }

        /// `document.<kind>` for every kind, built once.
        private static let documentEventTypes: [DocumentEventKind: String] = Dictionary(
            uniqueKeysWithValues: DocumentEventKind.allCases.map { ($0, "document.\($0.rawValue)") })
    }

    /// Position in the agent's event sequence: 1, 2, 3, … with no gaps, for the process lifetime.
    public var sequence: UInt64
    /// Seconds since the Unix epoch when the agent recorded it (for people; order is `sequence`).
    public var time: Double
    /// The event before rendering.
    public var content: Content

    /// Creates an event with its data in JSON form.
    public init(sequence: UInt64, type: String, time: Double, data: [String: JSONValue]) {
        self.init(sequence: sequence, time: time, content: .fields(type: type, data: data))
    }

    /// Creates an event from its content.
    public init(sequence: UInt64, time: Double, content: Content) {
        self.sequence = sequence
        self.time = time
        self.content = content
    }

    /// The kind, e.g. `document.changed`, `peer.connected`, `sync.progress`.
    public var type: String { content.type }

    /// Details.
    public var data: [String: JSONValue] { content.data }

    /// The JSON form sent on the socket.
    public var json: JSONValue {
        .object(["seq": .int(Int64(sequence)), "type": .string(type), "time": .double(time), "data": .object(data)])
    }

    public static func == (left: AgentEvent, right: AgentEvent) -> Bool {
        left.sequence == right.sequence && left.time == right.time && left.type == right.type && left.data == right.data
    }

}

/// A bounded ring of the most recent events, so a client that reconnects with `since` gets every
/// event it missed that the agent still holds, and learns exactly how many it can no longer get.
///
/// Invariants: `events` holds consecutive sequence numbers ending at `lastSequence`; at most
/// `capacity` are held; sequence numbers start at 1 and never repeat. Pure: time is passed in.
public struct EventRing: Sendable {
    /// The most events held.
    public let capacity: Int
    private var storage: [AgentEvent?]
    private var start = 0
    private(set) public var count = 0
    /// The sequence number of the newest event, 0 before the first.
    private(set) public var lastSequence: UInt64 = 0

    /// Creates an empty ring.
    public init(capacity: Int = AgentLimits.eventRingCapacity) {
        precondition(capacity > 0, "an event ring needs room for at least one event")
        self.capacity = capacity
        self.storage = Array(repeating: nil, count: capacity)
    }

    /// The oldest sequence number held, or `lastSequence + 1` when empty.
    public var firstSequence: UInt64 { lastSequence - UInt64(count) + 1 }

    /// Appends an event with the next sequence number and returns it; the oldest is dropped when full.
    @discardableResult
    public mutating func append(type: String, time: Double, data: [String: JSONValue]) -> AgentEvent {
        append(.fields(type: type, data: data), time: time)
    }

    /// Appends an event with the next sequence number and returns it; the oldest is dropped when full.
    @discardableResult
    public mutating func append(_ content: AgentEvent.Content, time: Double) -> AgentEvent {
        lastSequence += 1
        let event = AgentEvent(sequence: lastSequence, time: time, content: content)
        if count < capacity {
            storage[(start + count) % capacity] = event
            count += 1
        } else {
            storage[start] = event
            start = (start + 1) % capacity
        }
        return event
    }

    /// The events with a sequence number greater than `since`, oldest first, and how many such
    /// events were already dropped (`missed`: nonzero only when the client fell too far behind).
    public func events(after since: UInt64) -> (events: [AgentEvent], missed: UInt64) {
        guard since < lastSequence else { return ([], 0) }
        let first = firstSequence
        let missed = since + 1 < first ? first - (since + 1) : 0
        let skip = since + 1 > first ? Int(since + 1 - first) : 0
        var result: [AgentEvent] = []
        result.reserveCapacity(count - skip)
        for offset in skip..<count {
            result.append(storage[(start + offset) % capacity]!)
        }
        return (result, missed)
    }
}
