import CanopyCore
import CanopyStore
import DequeModule

/// The decisions of offering conflicts to resolvers outside the process (`Protocol/admin-v1.md`
/// §5, *Resolvers*), as a state machine with no I/O: the agent's `ResolverHub` and the
/// simulator's resolver driver feed it events and carry out the actions it returns, so the
/// simulator tests the logic production runs.
///
/// The data it keeps:
///
///     registrations  name → (prefix?, connection, tickets outstanding, documents to offer in
///                    arrival order, a read of conflicts running?)
///     waiting        (database, document) → (resolver, rule, previous revision, peer, ticket?,
///                    failed)
///     tickets        ticket → (database and document, resolver, timeout seconds): offers sent,
///                    not answered
///     retries        ticket that timed out → document: offers to make again once the backoff
///                    after that timeout has passed (`scheduleRetry`, `retryDue`)
///     answers        answers received, waiting for the next batch; `applying`: the batch being
///                    written
///
/// A conflict waits for a resolver when its rule names one (a `conflictAwaitingResolver` event).
/// It is offered as soon as that resolver is connected: the machine asks for its conflict to be
/// read (`readConflicts`), then sends the offer (`send`) and starts its timeout. An offer with no
/// answer in time, a refused answer and a disconnect leave the conflict `failed`. One that timed
/// out is offered again after a backoff (the offer's timeout, doubled after each further timeout
/// in a row, at most `retryMaximumSeconds`); any failed conflict is offered again when the config
/// is reloaded (`reloaded`, the backoff starting over), when its resolver registers again or when
/// the document changes again (a new event carrying a conflict). An event without a conflict is
/// the scan finding it again: an offer outstanding for it stands, and so does `failed`.
///
/// Invariants: a document has at most one offer outstanding; a ticket is never reused; at most
/// `offersInFlightMax` offers are outstanding per resolver; at most one read of conflicts runs per
/// resolver and one batch of answers is written at a time; nothing is offered once draining.
/// Every choice that reaches an action is made in a sorted order, never a dictionary's.
///
/// Every database's conflicts go to the resolvers its rules name; a registration's `prefix`
/// claims conflicts of the `default` database only.
package struct ResolverOffers<Connection: Hashable & Sendable>: Sendable {
    /// A conflicted document of one database: what the machine keeps conflicts by.
    package struct Key: Hashable, Comparable, Sendable, CustomStringConvertible {
        package let database: DatabaseName
        package let document: String

        package init(_ database: DatabaseName, _ document: String) {
            self.database = database
            self.document = document
        }

        package static func < (lhs: Self, rhs: Self) -> Bool {
            lhs.database != rhs.database ? lhs.database < rhs.database : lhs.document < rhs.document
        }

        /// `doc`, or `db/doc` outside `default` (for traces and logs).
        package var description: String { database == .default ? document : "\(database)/\(document)" }
    }

    /// What the driver carries out, in order.
    package enum Action: Sendable, Equatable {
        /// Read the conflicts of `documents` (`DocumentStore.conflicts(ids:)` of each one's
        /// database), then call `conflictsRead`.
        case readConflicts(resolver: String, documents: [Key])
        /// Send `{"resolve": offer}` to the connection.
        case send(Connection, offer: ResolverOffer)
        /// Call `timeoutFired(ticket)` after `seconds`, unless cancelled first.
        case scheduleTimeout(ticket: Int64, seconds: Int)
        /// The ticket's timeout is no longer needed.
        case cancelTimeout(ticket: Int64)
        /// Call `retryDue(ticket)` after `seconds`: the ticket timed out, and its conflict is to
        /// be offered again then. Never cancelled: a retry that no longer applies does nothing.
        case scheduleRetry(ticket: Int64, seconds: Int)
        /// Write these decisions, one transaction per database (`DocumentStore.applyResolutions`),
        /// then call `answersApplied` with one result per entry, in order.
        case apply([PendingAnswer])
        /// Publish these events as one batch.
        case emit([ResolverEvent])
        /// Answer the `resolver.answer` that carried `ticket`: the document's new current
        /// revision, or why the answer was refused.
        case reply(ticket: Int64, document: Key, Result<RevisionID, Refusal>)
        /// Each database's policy is now `ConflictPolicy.rules(policy(for:))`: the registrations
        /// changed.
        case policyChanged
        /// Run each database's policy over its conflicted documents (`retryConflictResolution`)
        /// and observe the results as `DocumentEvent.scanEvents` makes them.
        case scan
        /// Draining has finished: every offer sent was answered and written (or none was sent).
        case drainFinished
    }

    /// An answer received and not yet written.
    package struct PendingAnswer: Sendable, Equatable {
        package let ticket: Int64
        package let document: Key
        package let resolver: String
        package let decision: ResolutionDecision
    }

    /// An event the driver publishes (`Protocol/admin-v1.md` §5).
    package enum ResolverEvent: Sendable, Equatable {
        /// A resolver's answer settled a conflict (`conflictResolved`, `detail` the resolver), or
        /// its offer failed (`resolutionFailed`, `detail` the reason): an event about a document
        /// of `database` that no peer caused.
        case document(DocumentEvent, database: DatabaseName)
        /// The resolver `name`'s connection ended (`resolver.disconnected`).
        case disconnected(name: String)

        /// The document the event concerns, if any.
        package var documentID: String? {
            if case .document(let event, _) = self { return event.documentID }
            return nil
        }
    }

    /// Why a registration or an answer was refused: an admin error code (`invalid_argument`,
    /// `failed`, `not_found`, …) and the message the client is told.
    package struct Refusal: Error, Sendable, Equatable {
        package let code: String
        package let message: String

        package init(code: String, message: String) {
            self.code = code
            self.message = message
        }
    }

    /// A connected resolver.
    struct Registration: Sendable {
        let name: String
        /// The ids it claims beyond what rules route to it; nil: none.
        let prefix: String?
        let connection: Connection
        /// Tickets sent and not yet answered.
        var outstanding: Set<Int64> = []
        /// Documents to offer, in arrival order.
        var toOffer: Deque<Key> = []
        /// A read of conflicts to offer is running.
        var reading = false
    }

    /// A conflict kept for a resolver.
    struct Waiting: Sendable {
        var resolver: String
        /// The rule that routed it (nil: the catch-all or a registration's prefix).
        var rule: String?
        /// The node's current revision before the write that left the conflict.
        var previous: RevisionID?
        /// The peer whose revisions made it (nil: an import, or found by a scan).
        var peer: String?
        /// The offer outstanding, if one is.
        var ticket: Int64?
        /// Offered and not settled (no answer in time, a refused answer, a disconnect): not offered
        /// again until its retry is due (after a timeout), the config is reloaded, its resolver
        /// registers again or the document changes.
        var failed = false
        /// Offers of this conflict that timed out in a row: the backoff's exponent.
        var timeouts = 0
        /// The timed-out ticket whose `retryDue` offers it again; nil when no retry is due.
        var retryTicket: Int64?
    }

    /// An offer sent.
    struct Ticket: Sendable {
        let document: Key
        let resolver: String
        let timeoutSeconds: Int
    }

    /// Each database's rules and catch-all from the config (`default`'s policy adds a rule per
    /// connected resolver's prefix). A database not listed has no rules and settles
    /// automatically.
    package var configuredRules: [DatabaseName: ResolutionRules]
    /// Seconds an offer waits for its answer.
    package var timeoutSeconds: Int
    /// The longest backoff before a conflict whose offers timed out is offered again.
    package let retryMaximumSeconds: Int
    /// Offers outstanding at once per resolver.
    package let offersInFlightMax: Int
    /// Documents read per `readConflicts`.
    package let readBatchMax: Int
    /// Resolvers registered at once.
    package let resolversMax: Int

    var registrations: [String: Registration] = [:]
    var waiting: [Key: Waiting] = [:]
    var tickets: [Int64: Ticket] = [:]
    /// Retries scheduled: the ticket that timed out → its document. An entry goes when its
    /// `retryDue` comes, whether or not it still applies.
    var retries: [Int64: Key] = [:]
    var nextTicket: Int64 = 1
    var answers: [PendingAnswer] = []
    /// The batch being written, nil when none is.
    var applying: [PendingAnswer]?
    var stopping = false

    /// A machine with nothing registered and nothing waiting.
    package init(
        rules: [DatabaseName: ResolutionRules], timeoutSeconds: Int, retryMaximumSeconds: Int, offersInFlightMax: Int,
        readBatchMax: Int = 512, resolversMax: Int
    ) {
        precondition(offersInFlightMax > 0 && readBatchMax > 0 && resolversMax > 0 && retryMaximumSeconds > 0, "resolver limits must be positive")
        configuredRules = rules
        self.timeoutSeconds = timeoutSeconds
        self.retryMaximumSeconds = retryMaximumSeconds
        self.offersInFlightMax = offersInFlightMax
        self.readBatchMax = readBatchMax
        self.resolversMax = resolversMax
    }

    // MARK: Policy and scans

    /// A database's policy: the config's rules, then (for `default`) a rule per connected
    /// resolver for its prefix (by name), then the catch-all.
    package func policy(for database: DatabaseName) -> ResolutionRules {
        var rules = configuredRules[database] ?? ResolutionRules([], fallback: .automatic)
        guard database == .default else { return rules }
        for registration in registrations.values.sorted(by: { $0.name < $1.name }) {
            guard let prefix = registration.prefix else { continue }
            rules.rules.append(ResolutionRule(name: registration.name, idPrefix: prefix, strategy: .resolver(registration.name)))
        }
        return rules
    }

    /// A scan is due (start, registration): the policy as it now stands, then the scan.
    package func scanRequested() -> [Action] {
        [.policyChanged, .scan]
    }

    /// The config was reloaded: every conflict whose offer failed (timed out, refused, or lost
    /// with a connection) is offered again at once to its resolver when it is connected, its
    /// backoff starting over; then the policy as it now stands, and the scan.
    package mutating func reloaded() -> [Action] {
        var actions: [Action] = []
        var resolvers: Set<String> = []
        for document in waiting.keys.sorted() where waiting[document]!.failed {
            waiting[document]!.failed = false
            waiting[document]!.timeouts = 0
            waiting[document]!.retryTicket = nil
            let name = waiting[document]!.resolver
            guard registrations[name] != nil else { continue }
            registrations[name]!.toOffer.append(document)
            resolvers.insert(name)
        }
        for name in resolvers.sorted() { pump(name, &actions) }
        return actions + scanRequested()
    }

    // MARK: Conflicts arriving

    /// A batch of document events of `database` (replication, import, scan; `peer` nil for the
    /// last two): conflicts now waiting for a resolver are offered, settled ones forgotten.
    package mutating func observe(_ events: [DocumentEvent], peer: String?, database: DatabaseName = .default) -> [Action] {
        var actions: [Action] = []
        for event in events {
            switch event.kind {
            case .conflictAwaitingResolver:
                guard let resolver = event.detail else { continue }
                keepWaiting(Key(database, event.documentID), resolver: resolver, conflict: event.conflict, peer: peer, &actions)
            case .conflictResolved:
                forget(Key(database, event.documentID), &actions)
            default:
                continue
            }
        }
        return actions
    }

    /// The document was settled some other way (`resolve`, a policy): no offer stands for it.
    package mutating func forget(_ document: Key) -> [Action] {
        var actions: [Action] = []
        forget(document, &actions)
        return actions
    }

    /// The database was deleted: every conflict of it is forgotten and its offers voided.
    package mutating func forget(database: DatabaseName) -> [Action] {
        var actions: [Action] = []
        for key in waiting.keys.filter({ $0.database == database }).sorted() { forget(key, &actions) }
        return actions
    }

    private mutating func forget(_ document: Key, _ actions: inout [Action]) {
        guard let entry = waiting.removeValue(forKey: document) else { return }
        if let ticket = entry.ticket { withdraw(ticket, &actions) }
    }

    private mutating func keepWaiting(_ document: Key, resolver: String, conflict: DetectedConflict?, peer: String?, _ actions: inout [Action]) {
        var entry = Waiting(resolver: resolver, rule: conflict?.rule, previous: conflict?.previous, peer: peer)
        if let known = waiting[document] {
            // Found again by a scan: keep what the write that made it knew, and its offer.
            if conflict == nil && known.resolver == resolver { return }
            if let ticket = known.ticket { withdraw(ticket, &actions) }
            if conflict == nil { entry.previous = known.previous; entry.peer = known.peer; entry.rule = known.rule }
        }
        waiting[document] = entry
        guard registrations[resolver] != nil else { return }
        registrations[resolver]!.toOffer.append(document)
        pump(resolver, &actions)
    }

    /// Voids an offer: its answer, if it comes, gets `not_found`.
    mutating func withdraw(_ ticket: Int64, _ actions: inout [Action]) {
        guard let sent = tickets.removeValue(forKey: ticket) else { return }
        actions.append(.cancelTimeout(ticket: ticket))
        registrations[sent.resolver]?.outstanding.remove(ticket)
        waiting[sent.document]?.ticket = nil
    }

    // MARK: Offers

    /// Asks for the next conflicts to offer `name`, within its in-flight limit.
    mutating func pump(_ name: String, _ actions: inout [Action]) {
        guard !stopping, let waitingRegistration = registrations[name], !waitingRegistration.reading else { return }
        let room = offersInFlightMax - waitingRegistration.outstanding.count
        // Refill a batch at a time: one answer freeing one slot would otherwise cost a store read
        // per offer.
        guard room >= min(readBatchMax, max(1, offersInFlightMax / 2)) || waitingRegistration.outstanding.isEmpty else { return }
        // Taken out of the dictionary while it changes, so its queue is not copied.
        var registration = registrations.removeValue(forKey: name)!
        var batch: [Key] = []
        while batch.count < min(room, readBatchMax), let document = registration.toOffer.popFirst() {
            guard let entry = waiting[document], entry.resolver == name, entry.ticket == nil, !entry.failed else { continue }
            batch.append(document)
        }
        registration.reading = !batch.isEmpty
        registrations[name] = registration
        if !batch.isEmpty { actions.append(.readConflicts(resolver: name, documents: batch)) }
    }

    /// The read `readConflicts(name, asked)` asked for finished: `conflicts` are those still
    /// conflicted (a failed read passes none). Each still waiting for `name` is offered, in the
    /// order asked.
    package mutating func conflictsRead(_ conflicts: [Key: Conflict], asked: [Key], resolver name: String) -> [Action] {
        guard registrations[name] != nil else { return [] }
        registrations[name]!.reading = false
        var actions: [Action] = []
        for document in asked where conflicts[document] == nil && waiting[document]?.ticket == nil {
            waiting.removeValue(forKey: document)  // settled meanwhile, or gone
        }
        for document in asked {
            guard let conflict = conflicts[document], let entry = waiting[document], entry.resolver == name, entry.ticket == nil,
                !entry.failed
            else { continue }
            send(conflict, document, entry, to: name, &actions)
        }
        pump(name, &actions)
        return actions
    }

    private mutating func send(_ conflict: Conflict, _ document: Key, _ entry: Waiting, to name: String, _ actions: inout [Action]) {
        let ticket = nextTicket
        nextTicket += 1
        tickets[ticket] = Ticket(document: document, resolver: name, timeoutSeconds: timeoutSeconds)
        registrations[name]!.outstanding.insert(ticket)
        waiting[document]!.ticket = ticket
        actions.append(.send(
            registrations[name]!.connection, offer: Self.offer(conflict, entry, ticket: ticket, resolver: name, database: document.database)))
        actions.append(.scheduleTimeout(ticket: ticket, seconds: timeoutSeconds))
    }

    /// The offer as `Protocol/admin-v1.md` §5 specifies it: every open leaf (current first,
    /// deletions marked), the common ancestor's body, what this node had before, and who sent it.
    static func offer(_ conflict: Conflict, _ entry: Waiting, ticket: Int64, resolver: String, database: DatabaseName) -> ResolverOffer {
        ResolverOffer(
            ticket: ticket, resolver: resolver,
            conflict: Conflict(
                documentID: conflict.documentID, leaves: conflict.leaves, commonAncestorBody: conflict.commonAncestorBody,
                localRevision: entry.previous),
            peer: entry.peer, rule: entry.rule, database: database.text)
    }

    // MARK: Status

    /// The resolver each waiting conflict is kept for (connected or not).
    package var waitingResolvers: [Key: String] { waiting.mapValues(\.resolver) }

    /// The documents of `database` whose conflicts wait for a resolver (connected or not).
    package func waitingDocuments(in database: DatabaseName) -> Set<String> {
        Set(waiting.keys.lazy.filter { $0.database == database }.map(\.document))
    }

    /// The connected resolvers by name: prefix, offers outstanding, conflicts waiting for it.
    package var registrationRows: [(name: String, prefix: String?, offered: Int, waiting: Int)] {
        registrations.values.sorted { $0.name < $1.name }.map { registration in
            (registration.name, registration.prefix, registration.outstanding.count,
             waiting.values.filter { $0.resolver == registration.name }.count)
        }
    }

    /// True when nothing is under way: no read, no offer outstanding, no answer to write.
    package var isIdle: Bool {
        tickets.isEmpty && answers.isEmpty && applying == nil && !registrations.values.contains(where: \.reading)
    }
}
