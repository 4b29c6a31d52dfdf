import CanopyCore
import CanopyStore
import CanopyWire

/// What a compare found (`ReplicationSession.compareDigests`).
package struct DigestCompareOutcome: Sendable {
    /// The id prefix the comparison covered: empty for every document, or the prefix of the
    /// share the peer lets this node read.
    package var prefix: String
    /// The documents that differ, by id.
    package var differences: [DigestComparison.Difference]
    /// True when it stopped at the most differences asked for: more may differ.
    package var truncated: Bool
    /// Nodes of the digest tree the peer answered for, and the requests that took.
    package var nodesCompared: Int
    package var roundTrips: Int
}

/// Why a compare did not finish.
package enum DigestCompareFailure: Error, Sendable, Equatable {
    /// The peer's version does not compare digests (its `hello` lacks the `digests` feature).
    case unsupported
    /// The peer refused (not shared for reading, a filtered share, a node too large to list).
    case refused(code: ErrorCode, message: String)
    /// The session ended before the compare did.
    case disconnected
    /// No answer in time.
    case timedOut(seconds: Double)
    /// This node's store could not be read.
    case store(String)
}

/// One compare this node runs against the peer: its walk, its outstanding request and its end.
final class DigestCompareRun: @unchecked Sendable {
    var comparison: DigestComparison
    let requestedPrefix: String
    /// The prefix the peer answered under (its first reply sets it).
    var prefix: String?
    var roundTrips = 0
    /// The request outstanding and the nodes it asked about.
    var outstanding: (id: RequestID, nodes: [DigestNodePath])?
    var timer: (any Cancellable)?
    var completion: (@Sendable (Result<DigestCompareOutcome, DigestCompareFailure>) -> Void)?

    init(prefix: String, differencesMax: Int, completion: @escaping @Sendable (Result<DigestCompareOutcome, DigestCompareFailure>) -> Void) {
        comparison = DigestComparison(differencesMax: differencesMax)
        requestedPrefix = prefix
        self.completion = completion
    }
}

/// The digest exchange (replication-v1.md §6.13, `Protocol/digests.md` §6), when both sides set
/// the `digests` feature: as the answering side, what this node holds under the nodes the peer
/// asks about, restricted to what the peer may read; as the asking side, the walk that finds the
/// documents that differ.
extension ReplicationSession {
    /// Whether digest messages flow on this session.
    var digestsAgreed: Bool { machine.digestsAgreed }

    /// Encoded answers of one `digestNodes` stop growing past this size (at least one is sent).
    static let digestAnswerBytesTarget = 4 << 20

    // MARK: Answering

    /// The prefix the peer may compare under when it asks for `asked`: the asked one, or the
    /// longer prefix of the share; nil with the reason when it may read nothing it asked for.
    private func readablePrefix(_ asked: String) -> Result<String, ErrorMessage.Refusal> {
        guard configuration.direction.pushes else {
            return .failure(.init(code: .forbidden, message: "this node does not share this database with you for reading"))
        }
        switch configuration.pushFilter {
        case .all: return .success(asked)
        case .idPrefix(let shared):
            if asked.hasPrefix(shared) { return .success(asked) }
            if shared.hasPrefix(asked) { return .success(shared) }
            return .failure(.init(code: .forbidden, message: "no document under \"\(asked)\" is shared with you (you may read ids starting with \"\(shared)\")"))
        case .documentIDs, .predicate:
            return .failure(.init(code: .forbidden, message: "this node shares chosen documents of this database with you; a compare covers an id prefix"))
        }
    }

    func answerDigestGet(_ get: DigestGet) {
        let prefix: String
        switch readablePrefix(get.prefix) {
        case .success(let readable): prefix = readable
        case .failure(let refusal):
            return send(.error(ErrorMessage(requestID: get.requestID, code: refusal.code, message: refusal.message)))
        }
        let store = self.store
        partWriter.run({ () -> Result<[DigestNodeAnswer], ErrorMessage.Refusal> in
            do {
                return .success(try Self.digestAnswers(store, prefix: prefix, nodes: get.nodes))
            } catch let refusal as ErrorMessage.Refusal {
                return .failure(refusal)
            } catch {
                return .failure(.init(code: .storageFailure, message: "reading the digest tree failed"))
            }
        }) { [weak self] result in
            guard let self, !self.isClosed else { return }
            switch result {
            case .success(let answers):
                self.send(.digestNodes(DigestNodes(requestID: get.requestID, prefix: prefix, answers: answers)))
            case .failure(let refusal):
                self.send(.error(ErrorMessage(requestID: get.requestID, code: refusal.code, message: refusal.message)))
            }
        }
    }

    /// The answers for the first of `nodes` that fit `digestAnswerBytesTarget` (one at least).
    static func digestAnswers(_ store: any ReplicationStore, prefix: String, nodes: [DigestNodePath]) throws -> [DigestNodeAnswer] {
        var documents: [DigestDocument]?
        func all() throws -> [DigestDocument] {
            if let documents { return documents }
            let read = try store.digestDocuments(prefix: prefix, under: nodes)
            documents = read
            return read
        }
        var answers: [DigestNodeAnswer] = []
        var bytes = 0
        for node in nodes {
            var answer: DigestNodeAnswer
            if node == .root && prefix.isEmpty {
                let children = store.digestRootChildren
                let count = children.reduce(0) { $0 + $1.documents }
                answer = count <= UInt64(DigestTree.listedDocumentsMax) ? DigestTree.answer(for: node, from: try all()) : .children(children)
            } else {
                answer = DigestTree.answer(for: node, from: try all())
            }
            if case .documents(let listed) = answer, listed.count > WireLimits.digestDocumentsMax {
                throw ErrorMessage.Refusal(
                    code: .limitExceeded,
                    message: "\(listed.count) documents share the hash prefix \(node): more than one answer lists (\(WireLimits.digestDocumentsMax))")
            }
            bytes += answer.estimatedBytes
            if !answers.isEmpty && bytes > digestAnswerBytesTarget { break }
            answers.append(answer)
        }
        return answers
    }

    // MARK: Asking

    /// Compares this node's documents with the peer's under `prefix` (empty: every document the
    /// peer lets this node read), stopping at `differencesMax` differences; `completion` runs on
    /// the serial context.
    package func compareDigests(
        prefix: String, differencesMax: Int, timeoutSeconds: Double,
        completion: @escaping @Sendable (Result<DigestCompareOutcome, DigestCompareFailure>) -> Void
    ) {
        scheduler.assertOnContext()
        guard !isClosed else { return completion(.failure(.disconnected)) }
        guard peerHello != nil, digestsAgreed else { return completion(.failure(.unsupported)) }
        let run = DigestCompareRun(prefix: prefix, differencesMax: differencesMax, completion: completion)
        digestRuns.append(run)
        run.timer = scheduler.schedule(after: timeoutSeconds) { [weak self, weak run] in
            guard let self, let run else { return }
            self.endCompare(run, .failure(.timedOut(seconds: timeoutSeconds)))
        }
        askNext(run)
    }

    /// Sends the run's next request, or ends it when nothing is left to ask.
    private func askNext(_ run: DigestCompareRun) {
        guard run.completion != nil, run.outstanding == nil else { return }
        if run.comparison.toAsk.isEmpty {
            return endCompare(run, .success(DigestCompareOutcome(
                prefix: run.prefix ?? run.requestedPrefix, differences: run.comparison.sortedDifferences, truncated: run.comparison.truncated,
                nodesCompared: run.comparison.nodesCompared, roundTrips: run.roundTrips)))
        }
        guard machine.ourRequestsOutstanding < WireLimits.inFlightRequestsMax else {
            // Checkpoint and attachment requests fill the peer's allowance: ask a moment later.
            scheduler.schedule(after: 0.02) { [weak self, weak run] in
                guard let self, let run else { return }
                self.askNext(run)
            }
            return
        }
        let nodes = run.comparison.nextNodes(WireLimits.digestNodesMax)
        let id = allocateRequestID()
        run.outstanding = (id, nodes)
        run.roundTrips += 1
        send(.digestGet(DigestGet(requestID: id, prefix: run.prefix ?? run.requestedPrefix, nodes: nodes)))
    }

    func receiveDigestNodes(_ reply: DigestNodes) throws(ReplicationError) {
        guard let run = digestRuns.first(where: { $0.outstanding?.id == reply.requestID }), let asked = run.outstanding else { return }
        guard reply.answers.count <= asked.nodes.count else {
            throw .protocolViolation(.invalidReference(detail: "digestNodes answers \(reply.answers.count) nodes of the \(asked.nodes.count) asked"))
        }
        if let prefix = run.prefix, prefix != reply.prefix {
            throw .protocolViolation(.invalidReference(detail: "digestNodes changed the compared prefix"))
        }
        guard reply.prefix.hasPrefix(run.requestedPrefix) else {
            throw .protocolViolation(.invalidReference(detail: "digestNodes answered under a prefix that is not within the one asked"))
        }
        for (node, answer) in zip(asked.nodes, reply.answers) {
            switch answer {
            case .children(let children):
                guard node.bytes.count < DigestTree.pathBytesMax else {
                    throw .protocolViolation(.invalidReference(detail: "digestNodes answered a node of the deepest level with children"))
                }
                _ = children
            case .documents(let documents):
                guard documents.allSatisfy({ node.contains($0.idHash) && $0.id.hasPrefix(reply.prefix) }) else {
                    throw .protocolViolation(.invalidReference(detail: "digestNodes listed a document that is not under the node \(node)"))
                }
            }
        }
        run.prefix = reply.prefix
        let answered = Array(asked.nodes.prefix(reply.answers.count))
        let unanswered = Array(asked.nodes.dropFirst(reply.answers.count))
        let store = self.store
        let prefix = reply.prefix
        partWriter.run({ () -> Result<(local: [DigestDocument], rootChildren: [DigestChild]?), DigestCompareFailure> in
            do {
                let rootChildren = prefix.isEmpty && answered.contains(.root) ? store.digestRootChildren : nil
                // The root's children come from the kept buckets; its documents are read only
                // when the peer listed them (a database of a few documents).
                let needed = answered.enumerated().filter { index, node in
                    if node == .root, prefix.isEmpty, case .children = reply.answers[index] { return false }
                    return true
                }.map(\.element)
                let local = needed.isEmpty ? [] : try store.digestDocuments(prefix: prefix, under: needed)
                return .success((local, rootChildren))
            } catch {
                return .failure(.store("\(error)"))
            }
        }) { [weak self, weak run] result in
            guard let self, let run, run.completion != nil else { return }
            switch result {
            case .failure(let failure): self.endCompare(run, .failure(failure))
            case .success(let local):
                for (node, answer) in zip(answered, reply.answers) {
                    run.comparison.receive(answer, for: node, localChildren: node == .root ? local.rootChildren : nil, localDocuments: local.local)
                }
                run.comparison.askFirst(unanswered)
                run.outstanding = nil
                self.askNext(run)
            }
        }
    }

    /// The peer answered one of our requests with `error`: true when it was a `digestGet`.
    func receiveDigestError(_ error: ErrorMessage) -> Bool {
        guard let run = digestRuns.first(where: { $0.outstanding?.id == error.requestID }) else { return false }
        endCompare(run, .failure(.refused(code: error.code, message: error.message)))
        return true
    }

    /// Ends `run` with `result`, once.
    func endCompare(_ run: DigestCompareRun, _ result: Result<DigestCompareOutcome, DigestCompareFailure>) {
        guard let completion = run.completion else { return }
        run.completion = nil
        run.timer?.cancel()
        digestRuns.removeAll { $0 === run }
        completion(result)
    }

    /// Ends every compare in progress (the session ended).
    func endCompares() {
        for run in digestRuns { endCompare(run, .failure(.disconnected)) }
    }
}

extension ErrorMessage {
    /// A request refused: the code and message of the `error` that answers it.
    struct Refusal: Error, Sendable {
        var code: ErrorCode
        var message: String
    }
}

extension DigestNodeAnswer {
    /// About the bytes it takes in `digestNodes`.
    var estimatedBytes: Int {
        switch self {
        case .children(let children): return 2 + children.count * 38
        case .documents(let documents): return 2 + documents.reduce(0) { $0 + 3 + $1.id.utf8.count + $1.leaves.count * 20 }
        }
    }
}
