import CanopyWire

/// Where this node's pull (its subscription to the peer's changes) stands on one connection.
///
///     idle ──hello──▶ awaitingCheckpoint ──checkpoint──▶ subscribed(ended: false)
///                                                         │ caughtUp (one-shot) or unsubscribe
///                                                         ▼
///                                                       subscribed(ended: true) ──pullAgain──▶ awaitingCheckpoint
///     awaitingCheckpoint / subscribed ──the peer refuses the subscription──▶ refused
///
/// `idle` also covers a session that does not pull. A subscription that ended keeps its target
/// until its batches are written and acknowledged; only then may another pass start.
enum PullState {
    /// Not pulling: before the peer's `hello`, or the session does not pull.
    case idle
    /// Our `checkpointGet` waits for its answer; `local` is the checkpoint read before it.
    case awaitingCheckpoint(requestID: RequestID, replicationID: [UInt8], local: ReplicationCheckpoint?)
    /// Subscribed; `ended` once a one-shot subscription caught up or we unsubscribed (no new
    /// batches come, those in flight complete).
    case subscribed(SubscriptionTarget, ended: Bool)
    /// The peer refused our subscription (it does not push to us); the reason is for people.
    case refused(String)

    /// The subscription's target, while subscribed.
    var target: SubscriptionTarget? {
        if case .subscribed(let target, _) = self { return target }
        return nil
    }

    /// True once the subscription ended (see `subscribed`).
    var subscriptionEnded: Bool {
        if case .subscribed(_, let ended) = self { return ended }
        return false
    }

    /// True while a `checkpointGet` is unanswered.
    var awaitingCheckpoint: Bool {
        if case .awaitingCheckpoint = self { return true }
        return false
    }

    /// True when the peer refused to be pulled from.
    var isRefused: Bool {
        if case .refused = self { return true }
        return false
    }

    /// Marks the subscription ended; nothing when not subscribed.
    mutating func endSubscription() {
        if case .subscribed(let target, _) = self { self = .subscribed(target, ended: true) }
    }

    /// True when another pass may start: the peer's hello arrived, nothing is being asked, and
    /// any subscription ended with its batches done.
    var canStartAnotherPass: Bool {
        switch self {
        case .idle: return true
        case .awaitingCheckpoint, .refused: return false
        case .subscribed(let target, let ended): return ended && !target.hasBatchesInFlight
        }
    }
}
