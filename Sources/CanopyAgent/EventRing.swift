import CanopyAdmin
import CanopyCore
import CanopyReplication
import DequeModule

/// An agent event as the admin socket streams it: `{"seq":N,"type":"…","time":…,"data":{…}}`.
///
/// A replication batch records one event per document, most of which no client ever reads, so a
/// document event keeps the engine's `DocumentEvent` as it came and builds its `type` and `data`
/// only when they are read (`content`); two events are equal when their JSON forms are.
public struct AgentEvent: Sendable, Equatable {
    /// What an event holds before it is rendered.
    public enum Content: Sendable {
        /// An event's type and its data's members (`EventHub.emit(_:)` encodes typed data).
        case fields(type: String, data: [String: JSONValue])
        /// A replication document event concerning the peer `nodeID`, in `database`.
        case document(nodeID: String, event: DocumentEvent, database: DatabaseName = .default)
        /// An event about one document the agent made itself (a write through the admin socket,
        /// a `resolve`, damage found), kept unrendered: a bulk write records one per document.
        case agentDocument(Admin.DocumentEvent)

        /// An event of `D`'s type whose data is `data`'s members (every event type's data
        /// encodes as an object).
        public static func event<D: AdminEventData>(_ data: D) -> Content {
            .fields(type: D.eventType, data: (try? JSONValueEncoder().encodeMembers(data)) ?? [:])
        }

        /// The kind: a document event is named as `Protocol/admin-v1.md` §5 lists it
        /// (`Admin.DocumentEvent.Kind`).
        public var type: String { rendered.type }

        /// Details, rendered now for a document event.
        public var data: [String: JSONValue] { rendered.data }

        /// The type and the data, a document event rendered once for both.
        public var rendered: (type: String, data: [String: JSONValue]) {
            guard let event = documentEvent else {
                guard case .fields(let type, let data) = self else { preconditionFailure("only fields carry no document event") }
                return (type, data)
            }
            return (event.kind.rawValue, (try? JSONValueEncoder().encodeMembers(event)) ?? [:])
        }

        /// The data of a document event, typed; nil for another.
        public var documentEvent: Admin.DocumentEvent? {
            switch self {
            case .fields: nil
            case .document(let nodeID, let event, let database): Admin.DocumentEvent(event, nodeID: nodeID, database: database)
            case .agentDocument(let event): event
            }
        }
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

    /// The event as the socket sends it.
    public var admin: Admin.Event {
        let (type, data) = content.rendered
        return Admin.Event(seq: Int64(sequence), type: type, time: time, data: .object(data))
    }

    /// The event's line on a subscribed connection.
    public var line: JSONValue { Admin.EventLine(event: admin).json }

    public static func == (left: AgentEvent, right: AgentEvent) -> Bool {
        left.sequence == right.sequence && left.time == right.time && left.content.rendered == right.content.rendered
    }

}

/// A bounded ring of the most recent events, so a client that reconnects with `since` gets every
/// event it missed that the agent still holds, and learns exactly how many it can no longer get.
///
/// Events are held in segments, one per append: a replication batch's document events are kept
/// as the array the engine produced (`append(documents:peer:time:)`), so recording thousands of
/// them copies no event, and each is only turned into an `AgentEvent` when a client reads it.
///
/// Invariants: the held events have consecutive sequence numbers ending at `lastSequence`; at
/// most `capacity` are held (`count`): the oldest segment may hold up to `headSkip` events
/// already dropped, freed with the segment; sequence numbers start at 1 and never repeat. Pure:
/// time is passed in.
package struct EventRing: Sendable {
    /// Events recorded by one append, with consecutive sequence numbers from `firstSequence`.
    private struct Segment: Sendable {
        enum Events: Sendable {
            case contents([AgentEvent.Content])
            case documents(nodeID: String, [DocumentEvent], database: DatabaseName)
        }

        let firstSequence: UInt64
        let time: Double
        let events: Events

        var count: Int {
            switch events {
            case .contents(let contents): contents.count
            case .documents(_, let events, _): events.count
            }
        }

        /// The event at `offset` in this segment.
        func event(at offset: Int) -> AgentEvent {
            let content: AgentEvent.Content = switch events {
            case .contents(let contents): contents[offset]
            case .documents(let nodeID, let events, let database): .document(nodeID: nodeID, event: events[offset], database: database)
            }
            return AgentEvent(sequence: firstSequence + UInt64(offset), time: time, content: content)
        }
    }

    /// The most events held.
    public let capacity: Int
    private var segments: Deque<Segment> = []
    /// Events of the oldest segment already dropped.
    private var headSkip = 0
    private(set) public var count = 0
    /// The sequence number of the newest event, 0 before the first.
    private(set) public var lastSequence: UInt64 = 0

    /// Creates an empty ring.
    public init(capacity: Int = AgentLimits.eventRingCapacity) {
        precondition(capacity > 0, "an event ring needs room for at least one event")
        self.capacity = capacity
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
        append(Segment(firstSequence: lastSequence + 1, time: time, events: .contents([content])))
        return AgentEvent(sequence: lastSequence, time: time, content: content)
    }

    /// Appends `events`, in order, as document events of `database` concerning the peer
    /// `nodeID`, with the next sequence numbers; returns the first one's. The oldest events are
    /// dropped when full.
    @discardableResult
    public mutating func append(
        documents events: [DocumentEvent], peer nodeID: String, database: DatabaseName = .default, time: Double
    ) -> UInt64 {
        let first = lastSequence + 1
        if !events.isEmpty {
            append(Segment(firstSequence: first, time: time, events: .documents(nodeID: nodeID, events, database: database)))
        }
        return first
    }

    private mutating func append(_ segment: Segment) {
        let added = segment.count
        segments.append(segment)
        lastSequence += UInt64(added)
        count += added
        while count > capacity, let head = segments.first {
            let excess = count - capacity
            let remaining = head.count - headSkip
            if excess >= remaining {
                segments.removeFirst()
                headSkip = 0
                count -= remaining
            } else {
                headSkip += excess
                count -= excess
            }
        }
    }

    /// The events with a sequence number greater than `since`, oldest first, and how many such
    /// events were already dropped (`missed`: nonzero only when the client fell too far behind).
    public func events(after since: UInt64) -> (events: [AgentEvent], missed: UInt64) {
        guard since < lastSequence else { return ([], 0) }
        let first = firstSequence
        let missed = since + 1 < first ? first - (since + 1) : 0
        let from = max(since + 1, first)
        var result: [AgentEvent] = []
        result.reserveCapacity(Int(lastSequence - from + 1))
        for segment in segments {
            let end = segment.firstSequence + UInt64(segment.count)
            guard end > from else { continue }
            let start = Int(max(from, segment.firstSequence) - segment.firstSequence)
            for offset in start..<segment.count { result.append(segment.event(at: offset)) }
        }
        return (result, missed)
    }
}
