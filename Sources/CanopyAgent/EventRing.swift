import CanopyCore

/// An agent event as the admin socket streams it: `{"seq":N,"type":"…","time":…,"data":{…}}`.
public struct AgentEvent: Sendable, Equatable {
    /// Position in the agent's event sequence: 1, 2, 3, … with no gaps, for the process lifetime.
    public var sequence: UInt64
    /// The kind, e.g. `document.changed`, `peer.connected`, `sync.progress`.
    public var type: String
    /// Seconds since the Unix epoch when the agent recorded it (for people; order is `sequence`).
    public var time: Double
    /// Details.
    public var data: [String: JSONValue]

    /// Creates an event.
    public init(sequence: UInt64, type: String, time: Double, data: [String: JSONValue]) {
        self.sequence = sequence
        self.type = type
        self.time = time
        self.data = data
    }

    /// The JSON form sent on the socket.
    public var json: JSONValue {
        .object(["seq": .int(Int64(sequence)), "type": .string(type), "time": .double(time), "data": .object(data)])
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
        lastSequence += 1
        let event = AgentEvent(sequence: lastSequence, type: type, time: time, data: data)
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
