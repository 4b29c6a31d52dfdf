import CanopyAdmin
import CanopyAgent
import CanopyCore
import Foundation

/// Every write an agent acknowledged (it answered with a revision), per document, in order; and
/// the documents whose last write got no answer (the agent was killed while it was in flight), whose
/// outcome is unknown: such a write may or may not be there, but every acknowledged one must.
final class WriteLedger: @unchecked Sendable {
    struct Written {
        var rev: String
        var body: [String: JSONValue]
    }

    private let lock = NSLock()
    private var acknowledged: [String: [Written]] = [:]
    private var unanswered: Set<String> = []
    private(set) var acknowledgedCount = 0
    private(set) var unansweredCount = 0
    /// Writes the agent refused (a conflict or an error answer): none are expected.
    private(set) var refused: [String] = []

    func acknowledge(_ doc: String, rev: String, body: [String: JSONValue]) {
        lock.withLock {
            acknowledged[doc, default: []].append(Written(rev: rev, body: body))
            acknowledgedCount += 1
        }
    }

    func unanswered(_ docs: [String]) {
        lock.withLock {
            unanswered.formUnion(docs)
            unansweredCount += docs.count
        }
    }

    func refuse(_ what: String) { lock.withLock { refused.append(what) } }

    var snapshot: (acknowledged: [String: [Written]], unanswered: Set<String>) { lock.withLock { (acknowledged, unanswered) } }
    var refusedWrites: [String] { lock.withLock { refused } }
    var counts: (acknowledged: Int, unanswered: Int) { lock.withLock { (acknowledgedCount, unansweredCount) } }
}

/// A client writing to one agent through its admin socket as fast as the agent answers, until told
/// to stop: new documents (`put`), updates of its own documents (`put` with the revision it last
/// got back), and batches of new documents (`bulk_docs`). It owns the ids it writes (prefix), so two
/// writers never edit the same document. A write whose connection breaks (the agent was killed) is
/// recorded as unanswered and the writer reconnects once the agent serves again; a document with an
/// unanswered write is not updated again (its current revision is unknown).
final class Writer: BackgroundLoop, @unchecked Sendable {
    private let agent: TortureAgent
    private let prefix: String
    private let ledger: WriteLedger
    private var random: SplitMix64
    private var next = 0
    /// Documents this writer may update: the revision it last got back for each.
    private var known: [String: RevisionID] = [:]
    private var knownIDs: [String] = []

    init(agent: TortureAgent, prefix: String, ledger: WriteLedger, seed: UInt64) {
        self.agent = agent
        self.prefix = prefix
        self.ledger = ledger
        random = SplitMix64(seed: seed)
    }

    override func run() {
        var client: AdminSocketClient?
        while !stopping {
            guard let connected = client ?? (try? agent.client(timeout: 10)) else {
                pause(0.005)
                continue
            }
            client = connected
            let choice = random.next(below: 10)
            let ok: Bool
            if choice < 2, !knownIDs.isEmpty {
                ok = update(connected)
            } else if choice < 4 {
                ok = bulk(connected, count: 10)
            } else {
                ok = create(connected)
            }
            if !ok { client = nil }
        }
    }

    private func body(_ n: Int, version: Int) -> [String: JSONValue] {
        let pad = String(repeating: "x", count: Int(random.next(below: 200)))
        return ["writer": .string(prefix), "n": .int(Int64(n)), "v": .int(Int64(version)), "pad": .string(pad)]
    }

    private func newID() -> (String, Int) {
        defer { next += 1 }
        return (String(format: "%@-%07d", prefix, next), next)
    }

    /// Sends one command; nil when the connection broke (the outcome is unknown) or the agent
    /// answered `busy`.
    private func send<C: AdminCommand>(_ client: AdminSocketClient, _ command: C) -> Result<C.Reply, AdminFailure>? {
        guard let answer = try? client.call(command) else { return nil }
        if case .failure(let failure) = answer, failure.code == .busy { return nil }
        return answer.map(\.reply)
    }

    private func create(_ client: AdminSocketClient) -> Bool {
        let (doc, n) = newID()
        let written = body(n, version: 1)
        guard let answer = send(client, Admin.PutDocument(doc: doc, body: .object(written))) else {
            ledger.unanswered([doc])
            return false
        }
        record(doc, answer, written)
        return true
    }

    private func update(_ client: AdminSocketClient) -> Bool {
        let doc = knownIDs[random.index(below: knownIDs.count)]
        guard let rev = known[doc] else { return true }
        let written = body(next, version: rev.generation + 1)
        guard let answer = send(client, Admin.PutDocument(doc: doc, body: .object(written), rev: rev)) else {
            ledger.unanswered([doc])
            forget(doc)
            return false
        }
        record(doc, answer, written)
        return true
    }

    private func bulk(_ client: AdminSocketClient, count: Int) -> Bool {
        var bodies: [String: [String: JSONValue]] = [:]
        var docs: [JSONValue] = []
        for _ in 0..<count {
            let (doc, n) = newID()
            let written = body(n, version: 1)
            bodies[doc] = written
            var entry = written
            entry["_id"] = .string(doc)
            docs.append(.object(entry))
        }
        guard let answer = send(client, Admin.BulkDocuments(docs: docs)) else {
            ledger.unanswered(Array(bodies.keys))
            return false
        }
        guard case .success(.written(let results)) = answer else {
            ledger.refuse("bulk_docs: \(answer)")
            return true
        }
        for row in results.results {
            guard let written = bodies[row.id] else { continue }
            record(row.id, row.rev, written, otherwise: "\(row)")
        }
        return true
    }

    /// Records the answer to a `put`.
    private func record(_ doc: String, _ answer: Result<Admin.WriteReply, AdminFailure>, _ written: [String: JSONValue]) {
        switch answer {
        case .success(let reply): record(doc, reply.rev, written, otherwise: "\(reply)")
        case .failure(let failure): record(doc, nil, written, otherwise: "\(failure)")
        }
    }

    /// Records a write's outcome: a revision is an acknowledged write; none is a refusal, which
    /// `otherwise` describes.
    private func record(_ doc: String, _ rev: RevisionID?, _ written: [String: JSONValue], otherwise: @autoclosure () -> String) {
        guard let rev else {
            ledger.refuse("\(doc): \(otherwise())")
            forget(doc)
            return
        }
        ledger.acknowledge(doc, rev: rev.description, body: written)
        if known[doc] == nil { knownIDs.append(doc) }
        known[doc] = rev
    }

    private func forget(_ doc: String) {
        known[doc] = nil
        knownIDs.removeAll { $0 == doc }
    }
}

/// Checks every acknowledged write against what the agents hold.
enum LedgerCheck {
    struct Outcome {
        /// Acknowledged writes missing on at least one agent (or held with another body).
        var lost = 0
        var examples: [String] = []
    }

    /// Each acknowledged revision must be the document's current revision or in its history on
    /// every agent; where the last acknowledged one is current, its body must be what was written.
    static func check(_ ledger: WriteLedger, on agents: [TortureAgent]) throws -> Outcome {
        let (acknowledged, _) = ledger.snapshot
        var outcome = Outcome()
        var lostKeys: Set<String> = []
        for agent in agents {
            let client = try agent.client(timeout: 60)
            for (doc, writes) in acknowledged {
                let answer = try client.call(Admin.GetDocument(doc: doc, revs: true))
                let document = (try? answer.get())?.reply.doc.objectValue ?? [:]
                for (index, write) in writes.enumerated() {
                    var held = Documents.history(document, contains: write.rev)
                    if held, index == writes.count - 1, document["_rev"] == .string(write.rev) {
                        var body = document
                        for key in body.keys where key.hasPrefix("_") { body[key] = nil }
                        held = body == write.body
                    }
                    if !held, lostKeys.insert("\(doc) \(write.rev)").inserted {
                        outcome.lost += 1
                        if outcome.examples.count < 5 { outcome.examples.append("\(doc) \(write.rev) not on \(agent.name)") }
                    }
                }
            }
        }
        return outcome
    }
}
