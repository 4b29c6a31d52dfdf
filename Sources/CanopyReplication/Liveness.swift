/// Heartbeats and dead-peer detection for one connection (`Protocol/replication-v1.md` §6.9):
/// on each tick, a peer silent for `deadIntervals` heartbeat intervals is dead; otherwise a
/// `heartbeat` is due when this side sent nothing for half an interval.
///
/// A pure value on the scheduler's clock: the session records traffic and asks at each tick.
struct Liveness: Equatable {
    /// What a tick calls for.
    enum Action: Equatable {
        /// Nothing: traffic flows both ways.
        case none
        /// Send a `heartbeat`: this side has been quiet.
        case sendHeartbeat
        /// The peer sent nothing for this many seconds: close the connection.
        case peerDead(silentSeconds: Int)
    }

    let intervalSeconds: Double
    let deadIntervals: Double
    private(set) var lastReceived: Double
    private(set) var lastSent: Double

    init(intervalSeconds: Double, deadIntervals: Double, now: Double) {
        self.intervalSeconds = intervalSeconds
        self.deadIntervals = deadIntervals
        lastReceived = now
        lastSent = now
    }

    /// A message arrived.
    mutating func received(at now: Double) { lastReceived = now }

    /// A message went out.
    mutating func sent(at now: Double) { lastSent = now }

    /// What the tick at `now` calls for.
    func tick(at now: Double) -> Action {
        if now - lastReceived >= intervalSeconds * deadIntervals { return .peerDead(silentSeconds: Int(now - lastReceived)) }
        return now - lastSent >= intervalSeconds * 0.5 ? .sendHeartbeat : .none
    }
}
