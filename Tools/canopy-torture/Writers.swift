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
    private var known: [String: String] = [:]
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

    /// Sends one request; nil when the connection broke (the outcome is unknown).
    private func send(_ client: AdminSocketClient, _ command: String, _ arguments: [String: JSONValue]) -> [String: JSONValue]? {
        guard let response = try? client.request(command, arguments), !AdminSocketClient.isBusy(response) else { return nil }
        return response
    }

    private func create(_ client: AdminSocketClient) -> Bool {
        let (doc, n) = newID()
        let written = body(n, version: 1)
        guard let response = send(client, "put", ["doc": .string(doc), "body": .object(written)]) else {
            ledger.unanswered([doc])
            return false
        }
        record(doc, response, written)
        return true
    }

    private func update(_ client: AdminSocketClient) -> Bool {
        let doc = knownIDs[random.index(below: knownIDs.count)]
        guard let rev = known[doc] else { return true }
        let version = (Int(rev.prefix { $0 != "-" }) ?? 1) + 1
        let written = body(next, version: version)
        guard let response = send(client, "put", ["doc": .string(doc), "rev": .string(rev), "body": .object(written)]) else {
            ledger.unanswered([doc])
            forget(doc)
            return false
        }
        record(doc, response, written)
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
        guard let response = send(client, "bulk_docs", ["docs": .array(docs)]) else {
            ledger.unanswered(Array(bodies.keys))
            return false
        }
        guard response["ok"] == .bool(true), case .array(let results)? = response["results"] else {
            ledger.refuse("bulk_docs: \(response)")
            return true
        }
        for result in results.compactMap(\.objectValue) {
            guard case .string(let doc)? = result["id"], let written = bodies[doc] else { continue }
            record(doc, result.merging(["ok": .bool(true)]) { old, _ in old }, written)
        }
        return true
    }

    /// Records an answer: a revision is an acknowledged write; anything else is a refusal.
    private func record(_ doc: String, _ response: [String: JSONValue], _ written: [String: JSONValue]) {
        guard response["ok"] == .bool(true), case .string(let rev)? = response["rev"] else {
            ledger.refuse("\(doc): \(response)")
            forget(doc)
            return
        }
        ledger.acknowledge(doc, rev: rev, body: written)
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
                let response = try client.request("get", ["doc": .string(doc), "revs": .bool(true)])
                let document = response["doc"]?.objectValue ?? [:]
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
