import DequeModule
import Foundation

/// Bounds the request bytes all admin clients hold together, as `PendingWriteBudget` bounds the
/// bytes queued for them: sixty-three clients each sending a 19 MiB line took the agent from 35 to
/// 1,596 MiB, each within its own line limit.
///
/// The data model: every client may hold `AgentLimits.adminRequestBytesPerClientMax` of request
/// lines (read and not yet answered) on its own, so small requests never wait. A client that
/// needs more (a line that goes on past that) stops being read from and asks for a *grant*: room
/// for one more line of the largest size, `AgentLimits.adminLineBytesMax`. At most `grantsMax`
/// grants are out at once; the others wait, first come first served, and are read from again
/// when theirs comes. A grant is whole, so a client holding one can always finish its line: two
/// clients each halfway through a big line can never wait on each other.
///
/// Thread-safe (clients ask from their own queues). `onGrant` closures are called outside the
/// lock, once each.
final class RequestBytesBudget: @unchecked Sendable {
    let grantsMax: Int
    private let lock = NSLock()
    private var granted: Set<ObjectIdentifier> = []
    private var waiting: Deque<(owner: ObjectIdentifier, onGrant: @Sendable () -> Void)> = []

    init(grantsMax: Int) {
        precondition(grantsMax > 0, "a budget must allow one large line")
        self.grantsMax = grantsMax
    }

    /// The grants out now, and the clients waiting for one.
    var counts: (granted: Int, waiting: Int) { lock.withLock { (granted.count, waiting.count) } }

    /// Asks for a grant for `owner`: true when it is granted at once (`onGrant` is then not
    /// called); otherwise `owner` waits and `onGrant` is called when its turn comes. Asking again
    /// while holding or waiting changes nothing.
    func request(_ owner: ObjectIdentifier, onGrant: @escaping @Sendable () -> Void) -> Bool {
        lock.withLock {
            if granted.contains(owner) { return true }
            if waiting.contains(where: { $0.owner == owner }) { return false }
            if granted.count < grantsMax && waiting.isEmpty {
                granted.insert(owner)
                return true
            }
            waiting.append((owner, onGrant))
            return false
        }
    }

    /// `owner` no longer needs its grant (or has stopped waiting for one: its connection closed);
    /// the next waiters get the room.
    func release(_ owner: ObjectIdentifier) {
        let next: [@Sendable () -> Void] = lock.withLock {
            granted.remove(owner)
            waiting.removeAll { $0.owner == owner }
            var next: [@Sendable () -> Void] = []
            while granted.count < grantsMax, let first = waiting.popFirst() {
                granted.insert(first.owner)
                next.append(first.onGrant)
            }
            return next
        }
        for onGrant in next { onGrant() }
    }
}
