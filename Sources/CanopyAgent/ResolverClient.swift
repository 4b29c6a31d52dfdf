import CanopyAdmin
import CanopyCore
import CanopyReplication
import Logging

/// An application's conflict resolver for a running agent: it registers with the agent's admin
/// socket (`resolver.register`), is offered the conflicts kept for its name, and answers each
/// with a ``ResolutionDecision`` (`Protocol/admin-v1.md` §5, *Resolvers*).
///
/// ```swift
/// let client = try ResolverClient(socketPath: "/var/lib/canopy/admin.sock", name: "notes", prefix: "note:")
/// let counts = try await client.run { offer in
///     if offer.conflict.leaves.contains(where: \.isDeleted) { return .delete }
///     return .keep(offer.conflict.leaves[0].revision)
/// }
/// print("answered \(counts.answered), refused \(counts.refused)")
/// ```
///
/// Which conflicts it is offered: those whose config rule says `resolver NAME` (a rule's claim
/// stands while no resolver is connected, and its conflicts are offered when one registers), and,
/// while it is connected, those in documents no rule covers whose id starts with `prefix`.
///
/// ``run(_:)`` calls the closure one offer at a time, in the order the agent sent them, and sends
/// each answer at once without waiting for the agent's response (answers are pipelined; responses
/// are matched to them by request id as they arrive). Each response, and each offer left
/// unanswered, becomes an ``Outcome`` in ``outcomes`` and a figure in ``counts``: an application
/// sees there the answers the agent refused (a `pick` that is not an open leaf, a body with `_rev`,
/// a document no longer conflicted). The agent keeps a conflict whose answer it refused.
///
/// When the closure throws, no answer is sent: the offer is recorded as
/// ``Outcome/unanswered(ticket:documentID:error:)`` and the next offer is taken. The agent keeps
/// the conflict; after its resolver timeout (`resolver-timeout-seconds` in the config's `[limits]`,
/// 10 s unless set) it reports `resolution.failed` and offers the document again only when this
/// resolver registers again, the agent restarts or the document changes. Sending no answer rather
/// than ending the run keeps one document the closure cannot merge from stopping every other one.
///
/// A client holds one admin connection and serves one registration: ``run(_:)`` is called once.
/// To register again (after the agent restarted), make a new client. The type is `Sendable`: its
/// stored properties are immutable, and the connection's state lives on one serial queue.
public final class ResolverClient: Sendable {
    /// What ``run(_:)`` has seen so far.
    public struct Counts: Sendable, Equatable {
        /// Offers received from the agent.
        public var offered = 0
        /// Answers the agent applied.
        public var answered = 0
        /// Answers the agent refused (it keeps those conflicts).
        public var refused = 0
        /// Offers the closure threw for, or that came when the connection was closing: no answer
        /// was sent.
        public var unanswered = 0

        /// Creates counts, all zero unless given.
        public init(offered: Int = 0, answered: Int = 0, refused: Int = 0, unanswered: Int = 0) {
            self.offered = offered
            self.answered = answered
            self.refused = refused
            self.unanswered = unanswered
        }
    }

    /// What became of one offer.
    public enum Outcome: Sendable {
        /// The agent applied the answer; `revision` is the document's new current revision.
        case answered(ticket: Int64, documentID: String, revision: RevisionID)
        /// The agent refused the answer with this error and keeps the conflict
        /// (`invalid_argument`, `not_conflicted`, `not_found` for a void ticket, …).
        case refused(ticket: Int64, documentID: String, AdminFailure)
        /// No answer was sent: the closure threw `error` (or the connection had closed).
        case unanswered(ticket: Int64, documentID: String, error: any Error)
    }

    /// Why a client could not connect, register or go on.
    public enum Failure: Error, Sendable, CustomStringConvertible {
        /// Nothing accepted the connection at `path`.
        case unreachable(path: String, detail: String)
        /// The agent refused the registration (the name is taken by a connected resolver, the
        /// name is not valid, the agent is `busy`, …).
        case registrationRefused(AdminFailure)
        /// The agent closed the connection before answering the registration.
        case closed
        /// The agent sent a line that breaks `Protocol/admin-v1.md`; the client closed the
        /// connection.
        case protocolViolation(String)

        public var description: String {
            switch self {
            case .unreachable(let path, let detail): "cannot reach the agent at \(path): \(detail)"
            case .registrationRefused(let failure): "the agent refused the registration: \(failure.code.rawValue): \(failure.message)"
            case .closed: "the agent closed the connection"
            case .protocolViolation(let detail): "the agent broke the admin protocol: \(detail)"
            }
        }
    }

    /// The most answer bytes queued for a connection the agent does not read. Past it the
    /// connection is closed, as the agent's own writes are (`AgentLimits.adminPendingWriteBytesMax`):
    /// an agent that stops reading is not buffered for without end. Answers go out as the agent
    /// reads requests, so the queue holds only answers written faster than the agent takes them.
    public static let pendingAnswerBytesMax = AgentLimits.adminPendingWriteBytesMax

    /// The most outcomes ``outcomes`` holds for an application that does not read them; older
    /// ones are dropped first (``counts`` still counts them). As many as the agent has offers
    /// outstanding per resolver.
    public static let outcomesBufferedMax = AgentLimits.resolverOffersInFlightMax

    /// The registration's name: the agent offers it the conflicts whose rule says `resolver NAME`.
    public let name: String
    /// The registration's id prefix; nil: the agent's default (what rules route to this name,
    /// or every conflict no rule covers when no rule names it).
    public let prefix: String?
    /// Each answer's outcome, as its response arrives, and each offer left unanswered. One reader;
    /// it finishes when ``run(_:)`` ends.
    public let outcomes: AsyncStream<Outcome>
    private let connection: ResolverConnection

    /// Connects to the agent's admin socket at `socketPath`; ``run(_:)`` registers.
    ///
    /// - Parameters:
    ///   - name: the resolver's name, 1–64 letters, digits, `-`, `_`, `.` (the agent checks it when
    ///     ``run(_:)`` registers); the config's `strategy = resolver NAME` names it.
    ///   - prefix: document ids it claims while connected, beyond those a rule routes to it (nil:
    ///     none when a rule names this resolver, every id no rule covers when none does).
    ///   - logger: where refusals, skipped offers and a broken connection are logged; the library
    ///     never bootstraps logging.
    /// - Throws: ``Failure/unreachable(path:detail:)`` when nothing listens at `socketPath`.
    public init(socketPath: String, name: String = "default", prefix: String? = nil, logger: Logger = Logger(label: "canopy.resolver-client")) throws(Failure) {
        self.name = name
        self.prefix = prefix
        let (outcomes, continuation) = AsyncStream.makeStream(of: Outcome.self, bufferingPolicy: .bufferingNewest(Self.outcomesBufferedMax))
        self.outcomes = outcomes
        connection = try ResolverConnection(path: socketPath, logger: logger, outcomes: continuation)
    }

    deinit { connection.close() }

    /// The figures so far; after ``run(_:)`` returns, its final ones.
    public var counts: Counts { connection.snapshot }

    /// Registers, then answers every offer with `resolve`'s decision until the agent closes the
    /// connection (it shuts down) or the task is cancelled.
    ///
    /// `resolve` runs on the calling task, one offer at a time; while it runs, later offers and
    /// the responses to earlier answers go on arriving. It may suspend and may throw: a throw sends
    /// no answer for that offer (see the type's discussion) and the run goes on.
    ///
    /// - Returns: the counts, when the agent closed the connection.
    /// - Throws: ``Failure/registrationRefused(_:)`` or ``Failure/closed`` when the registration
    ///   did not succeed; ``Failure/protocolViolation(_:)`` when the agent sent a line that breaks
    ///   the protocol; `CancellationError` when the task was cancelled (the connection is closed
    ///   first, and the agent keeps the conflicts offered and not answered).
    @discardableResult
    public func run(_ resolve: (ResolverOffer) async throws -> ResolutionDecision) async throws -> Counts {
        try await withTaskCancellationHandler {
            do { try await connection.register(name: name, prefix: prefix) } catch {
                try Task.checkCancellation()
                throw error
            }
            for await offer in connection.offers {
                if Task.isCancelled { break }
                let decision: ResolutionDecision
                do {
                    decision = try await resolve(offer)
                } catch {
                    connection.skip(offer, error)
                    continue
                }
                connection.answer(offer, decision)
            }
            try Task.checkCancellation()
            if let failure = connection.closingFailure { throw failure }
            return connection.snapshot
        } onCancel: {
            connection.close()
        }
    }
}
