import DequeModule

/// When a peer horizon may be recorded (`DocumentStore.recordPeerHorizon`, `Protocol/design.md`
/// §2.7): once every `revisions` message the session received from the peer before the
/// `checkpointSet` that implies the horizon has been written.
///
/// Why: a horizon lets this node stem the leaves the peer no longer holds. The peer's `revisions`
/// messages sent before its `checkpointSet` carry leaves it held then. On the connection they
/// arrive first, but they are checked and written on the worker, and may still wait there when
/// the `checkpointSet` is handled on the serial context. Recorded at once, the horizon would let
/// this node stem such a revision (an inner revision here by then) before the waiting write
/// inserts it again — as an open leaf with no link to its descendants: a conflict no other node
/// has, for good. (The simulator found it with the concurrent worker: `canopy-sim --seed 220
/// --nodes 4 --topology ring --faults high --policy throwing --docs 3 --revs-limit 2
/// --batch-size 3 --window 8`.)
///
/// A pure value: the session counts the messages it receives and writes and records the
/// horizons this hands back. Messages dropped unwritten (a failed write, the session's end)
/// hold the horizons after them back for the rest of the session: a late horizon only stems
/// less, and the next session's checkpoint copies record it again.
struct PeerHorizonBarrier<Horizon> {
    /// `revisions` messages received so far.
    private(set) var received = 0
    /// `revisions` messages written so far.
    private(set) var written = 0
    /// Horizons waiting, oldest first, each with the count of messages that must be written first.
    private var waiting: Deque<(receivedBefore: Int, horizon: Horizon)> = []

    /// A `revisions` message arrived.
    mutating func revisionsReceived() {
        received += 1
    }

    /// The horizon a `checkpointSet` implies: returned when it may be recorded now, else kept
    /// until the messages received before it are written.
    mutating func arrived(_ horizon: Horizon) -> Horizon? {
        guard waiting.isEmpty, written >= received else {
            waiting.append((received, horizon))
            return nil
        }
        return horizon
    }

    /// `count` received messages were written (in arrival order); returns the horizons that may
    /// now be recorded, oldest first.
    mutating func revisionsWritten(_ count: Int) -> [Horizon] {
        written += count
        var ready: [Horizon] = []
        while let head = waiting.first, head.receivedBefore <= written {
            waiting.removeFirst()
            ready.append(head.horizon)
        }
        return ready
    }
}
