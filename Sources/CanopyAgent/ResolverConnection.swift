import CanopyAdmin
import CanopyCore
import CanopyReplication
import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The admin connection a ``ResolverClient`` runs on: the socket, the lines read from it, the
/// registration and the answers waiting for their responses.
///
/// The data it keeps:
///
///     registration: nil → sent (its request id, the waiting `run`) → nil once answered or closed
///     answers:      request id → (ticket, document), from send until the agent's response
///     offers:       the `resolve` lines parsed, in arrival order, for `run` to take
///
/// Invariants: all state is touched only on `queue`, which is also the `StreamConnection`'s
/// queue. A request id is never reused. Once `closed`, the offer and outcome streams are
/// finished and nothing more is sent. The offer stream is unbounded on our side because the agent
/// bounds it: at most `AgentLimits.resolverOffersInFlightMax` offers are outstanding per resolver.
final class ResolverConnection: @unchecked Sendable {
    private let queue = DispatchQueue(label: "canopy.resolver-client")
    private let connection: StreamConnection
    private let logger: Logger
    private let offersContinuation: AsyncStream<ResolverOffer>.Continuation
    private let outcomesContinuation: AsyncStream<ResolverClient.Outcome>.Continuation
    /// The offers read, for `ResolverClient.run` (one consumer).
    let offers: AsyncStream<ResolverOffer>

    private var buffer: [UInt8] = []
    private var nextID: Int64 = 1
    private var registerCalled = false
    private var closed = false
    /// Why the connection closed, when it was not the agent's ordinary close.
    private var failure: ResolverClient.Failure?
    private var registration: (id: Int64, reply: CheckedContinuation<Result<Void, ResolverClient.Failure>, Never>)?
    private var answers: [Int64: (ticket: Int64, document: String)] = [:]
    private var counts = ResolverClient.Counts()

    /// Connects to the admin socket at `path`; nothing is read or sent until `register`.
    init(path: String, logger: Logger, outcomes: AsyncStream<ResolverClient.Outcome>.Continuation) throws(ResolverClient.Failure) {
        let fd: Int32
        do { fd = try Socket.connectUnix(path) } catch { throw .unreachable(path: path, detail: error.description) }
        do { try Socket.setNonBlocking(fd) } catch {
            Glibc.close(fd)
            throw .unreachable(path: path, detail: error.description)
        }
        connection = StreamConnection(fd: fd, queue: queue, pendingWriteBytesMax: ResolverClient.pendingAnswerBytesMax)
        self.logger = logger
        outcomesContinuation = outcomes
        (offers, offersContinuation) = AsyncStream.makeStream(of: ResolverOffer.self)
    }

    /// What has happened so far.
    var snapshot: ResolverClient.Counts { queue.sync { counts } }

    /// Why the connection ended, when the agent did not simply close it (a line that broke the
    /// protocol). Read after `offers` has finished.
    var closingFailure: ResolverClient.Failure? { queue.sync { failure } }

    // MARK: Requests

    /// Starts reading and sends `resolver.register`; returns once the agent has answered it.
    /// Called once (`ResolverClient.run` checks).
    func register(name: String, prefix: String?) async throws(ResolverClient.Failure) {
        let first = queue.sync {
            defer { registerCalled = true }
            return !registerCalled
        }
        precondition(first, "ResolverClient.run is called once per client; make a new client to register again")
        let outcome = await withCheckedContinuation { (reply: CheckedContinuation<Result<Void, ResolverClient.Failure>, Never>) in
            queue.async { [self] in
                guard !closed else { return reply.resume(returning: .failure(failure ?? .closed)) }
                connection.start(onRead: { [unowned self] in received($0) }, onClose: { [unowned self] in finished() })
                let id = send(Admin.RegisterResolver(name: name, prefix: prefix))
                registration = (id, reply)
            }
        }
        try outcome.get()
    }

    /// Sends the answer to `offer` without waiting for its response; the response becomes an
    /// outcome when it arrives.
    func answer(_ offer: ResolverOffer, _ decision: ResolutionDecision) {
        queue.async { [self] in
            guard !closed else { return unanswered(offer, ResolverClient.Failure.closed) }
            let id = send(Admin.AnswerResolver(ticket: offer.ticket, resolution: decision.resolution))
            answers[id] = (offer.ticket, offer.documentID)
        }
    }

    /// Records that the application's closure threw for `offer`: no answer is sent.
    func skip(_ offer: ResolverOffer, _ error: any Error) {
        queue.async { [self] in unanswered(offer, error) }
    }

    /// Closes the connection; the agent keeps the conflicts offered and not answered.
    func close() {
        queue.async { [self] in
            connection.close()
            finished()  // a connection never started has no close handler to call it
        }
    }

    private func send<C: AdminCommand>(_ command: C) -> Int64 {
        dispatchPrecondition(condition: .onQueue(queue))
        let id = nextID
        nextID += 1
        connection.send(AdminRequestLine.encode(command, id: id) + [UInt8(ascii: "\n")])
        return id
    }

    // MARK: Lines

    private func received(_ bytes: ArraySlice<UInt8>) {
        dispatchPrecondition(condition: .onQueue(queue))
        var start = bytes.startIndex
        while !closed, let newline = bytes[start...].firstIndex(of: UInt8(ascii: "\n")) {
            buffer.append(contentsOf: bytes[start..<newline])
            start = newline + 1
            let line = buffer
            buffer = []
            if !line.isEmpty { handle(line) }
        }
        guard !closed else { return }
        buffer.append(contentsOf: bytes[start...])
        // The agent bounds no response or stream line (admin-v1.md §2); `AdminSocketClient`'s
        // limit is the one every client of this module applies.
        if buffer.count > AdminSocketClient.lineBytesMax {
            violated("the agent sent a line over \(AdminSocketClient.lineBytesMax) bytes")
        }
    }

    /// One line from the agent: an offer, a response (to the registration or to an answer), or
    /// something this client does not use (an event), which is skipped as §3 allows.
    private func handle(_ line: [UInt8]) {
        let read: AdminLine
        do throws(AdminFailure) {
            read = try AdminLine.read(line)
        } catch {
            return violated(error.message)
        }
        switch read {
        case .offer(let offer):
            counts.offered += 1
            offersContinuation.yield(offer)
        case .response(let id, let members):
            responded(id, members)
        case .refusal(let refusal):
            // `busy` or `parse_error`: the agent could not tell which request it refers to.
            if let registration {
                self.registration = nil
                registration.reply.resume(returning: .failure(.registrationRefused(refusal)))
                return connection.close()
            }
            logger.warning("the agent refused a line", metadata: ["code": "\(refusal.code.rawValue)", "message": "\(refusal.message)"])
        case .event, .upload, .other:
            break
        }
    }

    private func responded(_ id: Int64, _ members: [String: JSONValue]) {
        if let registration, registration.id == id {
            self.registration = nil
            if let refusal = AdminResponseLine.failure(in: members) {
                registration.reply.resume(returning: .failure(.registrationRefused(refusal)))
                return connection.close()
            }
            return registration.reply.resume(returning: .success(()))
        }
        guard let sent = answers.removeValue(forKey: id) else { return }
        if let refusal = AdminResponseLine.failure(in: members) {
            counts.refused += 1
            logger.notice("the agent refused an answer; it keeps the conflict", metadata: [
                "doc": "\(sent.document.prefix(80))", "code": "\(refusal.code.rawValue)", "message": "\(refusal.message)",
            ])
            outcomesContinuation.yield(.refused(ticket: sent.ticket, documentID: sent.document, refusal))
        } else if case .success(let written) = AdminResponseLine.reply(to: Admin.AnswerResolver.self, from: members) {
            counts.answered += 1
            outcomesContinuation.yield(.answered(ticket: sent.ticket, documentID: sent.document, revision: written.rev))
        } else {
            violated("the agent answered request \(id) without a revision")
        }
    }

    // MARK: Endings

    private func unanswered(_ offer: ResolverOffer, _ error: any Error) {
        dispatchPrecondition(condition: .onQueue(queue))
        counts.unanswered += 1
        logger.warning("no answer sent for a conflict; the agent keeps it", metadata: [
            "doc": "\(offer.documentID.prefix(80))", "ticket": "\(offer.ticket)", "error": "\(error)",
        ])
        outcomesContinuation.yield(.unanswered(ticket: offer.ticket, documentID: offer.documentID, error: error))
    }

    /// The agent broke the protocol: nothing it sends after that can be trusted, so the
    /// connection is closed and `run` throws `protocolViolation`.
    private func violated(_ detail: String) {
        dispatchPrecondition(condition: .onQueue(queue))
        logger.error("closing the resolver connection", metadata: ["reason": "\(detail)"])
        failure = .protocolViolation(detail)
        connection.close()
    }

    /// The connection closed, for any reason: every waiter is told, and the streams end.
    private func finished() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !closed else { return }
        closed = true
        if let registration {
            self.registration = nil
            registration.reply.resume(returning: .failure(failure ?? .closed))
        }
        offersContinuation.finish()
        outcomesContinuation.finish()
    }
}
