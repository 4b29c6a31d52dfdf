import CanopyWire

/// The copy of this node's pull checkpoint that the peer keeps (`checkpointSet`,
/// `Protocol/replication-v1.md` §6.8): when to send one, and what is in flight.
///
/// Rules: a copy is sent every `everyBatches` completed batches and when the pull catches up; at
/// most one `checkpointSet` is in flight (each supersedes the last, and the peer takes only
/// `WireLimits.inFlightRequestsMax` requests), so a newer checkpoint made while one is in flight
/// waits and goes out when the ack returns. A refused set is forgotten: the next batch tries again.
///
/// A pure value: events in, the request to send out. The session owns the request ids and the
/// message (the checkpoint itself lives in `SubscriptionTarget`).
struct RemoteCheckpointer: Equatable {
    /// Completed batches between copies.
    let everyBatches: Int
    /// The `checkpointSet` awaiting its ack.
    private(set) var inFlight: RequestID?
    /// A newer checkpoint to send once the one in flight is acknowledged.
    private(set) var deferred = false
    private var batchesSinceCopy = 0

    init(everyBatches: Int) {
        self.everyBatches = max(1, everyBatches)
    }

    /// True when the peer's copy is as new as this node's checkpoint was when last offered: no
    /// set in flight and none waiting (a draining session waits for this).
    var isSettled: Bool { inFlight == nil && !deferred }

    /// A batch completed with a new local checkpoint. Returns true when a `checkpointSet` is to
    /// be sent now (then call `sent(_:)` with its request id).
    mutating func batchCompleted(caughtUp: Bool) -> Bool {
        batchesSinceCopy += 1
        guard batchesSinceCopy >= everyBatches || caughtUp else { return false }
        return offer()
    }

    /// The `checkpointSet` with `requestID` went out.
    mutating func sent(_ requestID: RequestID) {
        inFlight = requestID
    }

    /// The peer acknowledged the set in flight. Returns true when the deferred newer checkpoint
    /// is to be sent now.
    mutating func acknowledged() -> Bool {
        inFlight = nil
        guard deferred else { return false }
        deferred = false
        return offer()
    }

    /// The peer answered `requestID` with an error. Returns true when it was the set in flight
    /// (which is then forgotten; the next completed batch offers a copy again).
    mutating func refused(_ requestID: RequestID) -> Bool {
        guard requestID == inFlight else { return false }
        inFlight = nil
        return true
    }

    /// A copy is due: send it now unless one is in flight, in which case it waits.
    private mutating func offer() -> Bool {
        batchesSinceCopy = 0
        guard inFlight == nil else {
            deferred = true
            return false
        }
        return true
    }
}
