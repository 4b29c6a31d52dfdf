import Foundation

/// Which admin clients hold the agent's connection slots, and which one makes room when they are
/// all taken (Protocol/admin-v1.md §1).
///
/// The data model: `AgentLimits.adminConnectionsMax` general slots serve any command;
/// `AgentLimits.adminOperatorConnectionsMax` more, the operator's slots, serve only
/// `operatorCommands` (what an operator needs to see the agent and stop it). A newcomer takes
/// the first of these that applies:
///
/// 1. a free general slot;
/// 2. the general slot of the client idle the longest, which is closed;
/// 3. a free operator slot;
/// 4. the operator slot of the client idle the longest there, which is closed;
/// 5. none: it is told `busy` and closed.
///
/// A client is *idle* when it has no request read and unanswered, no upload or body in transfer
/// and no stream (`events`, a registered resolver); the one idle the longest is the one whose
/// last request was answered (or whose connection opened) first. So sixty-four scripts that
/// connected and went quiet cannot lock the operator out, and neither can sixty-four streams;
/// only clients that keep a request running in every slot, the operator's too, can.
///
/// Pure: times are passed in; ties go to the lower `id` (the earlier connection).
struct AdminClientSlots {
    /// What a client is, as the choice sees it.
    struct Candidate: Equatable {
        /// The connection's number: connections are numbered as they arrive.
        var id: UInt64
        /// Where it sits.
        var operatorOnly: Bool
        /// nil while it is busy; else the monotonic seconds since which it has been idle.
        var idleSince: Double?
    }

    /// Where a newcomer goes.
    enum Admission: Equatable {
        /// Into a slot: an operator slot when `operatorOnly`, closing `closing` (in order of
        /// preference, the first that is still idle) when that slot is taken.
        case admit(operatorOnly: Bool, closing: [UInt64])
        /// Every slot is held by a busy client.
        case refuse
    }

    /// The commands a client on an operator slot may send; anything else there is answered
    /// `busy`. `stats` is the counters `status` would show in part, as cheap to serve.
    static let operatorCommands: Set<String> = ["peers", "shutdown", "stats", "status"]
    /// The same, as the refusal names them.
    static let operatorCommandsInWords = "status, peers, stats and shutdown"

    let generalMax: Int
    let operatorMax: Int

    /// Where a newcomer goes, given the clients connected now.
    func admission(_ clients: [Candidate]) -> Admission {
        for operatorOnly in [false, true] {
            let held = clients.filter { $0.operatorOnly == operatorOnly }
            let capacity = operatorOnly ? operatorMax : generalMax
            if held.count < capacity { return .admit(operatorOnly: operatorOnly, closing: []) }
            let idle = held.compactMap { client in client.idleSince.map { (since: $0, id: client.id) } }
                .sorted { ($0.since, $0.id) < ($1.since, $1.id) }
            if !idle.isEmpty { return .admit(operatorOnly: operatorOnly, closing: idle.map(\.id)) }
        }
        return .refuse
    }
}

/// One client's activity as the server sees it from its own queue: whether the client is idle
/// and since when, and whether the server has claimed it to make room. Thread-safe (the client
/// updates it on its queue, the server reads it on its own).
///
/// Invariant: once `claim` has succeeded, `beginWork` returns false for ever, so a client closed
/// to make room starts no request after the server counted its slot as free.
final class AdminClientActivity: @unchecked Sendable {
    private let lock = NSLock()
    private var idleSince: Double?
    private var streams = false
    private var claimed = false

    init(now: Double) { idleSince = now }

    /// nil while busy or streaming; else since when it has been idle.
    var idleSinceSeconds: Double? { lock.withLock { streams || claimed ? nil : idleSince } }

    /// The client read bytes: it is busy until `settle`. False when it was claimed to make room
    /// (what it sent is dropped).
    func beginWork() -> Bool {
        lock.withLock {
            guard !claimed else { return false }
            idleSince = nil
            return true
        }
    }

    /// The client finished what it could do for now: idle from `now` unless it `holdsWork`.
    func settle(holdsWork: Bool, now: Double) {
        lock.withLock {
            if holdsWork {
                idleSince = nil
            } else if idleSince == nil {
                idleSince = now
            }
        }
    }

    /// The client serves a stream from now on: never closed to make room.
    func startStreaming() { lock.withLock { streams = true } }

    /// Takes the client for closing if it is idle now; false if it is busy or streams.
    func claim() -> Bool {
        lock.withLock {
            guard !claimed, !streams, idleSince != nil else { return false }
            claimed = true
            return true
        }
    }
}
