import CanopyTestSupport
import CanopyAgent
import CanopyCore
import CanopyReplication
import Dispatch
import Foundation
import Testing

/// The two resolver clients an application copies, `ResolverClient` (Swift) and
/// `Tools/examples/resolver.py` (Python), registered on agent B as `notes`, merging conflicts that
/// edits made apart on agents A and B leave once the two replicate.
///
/// The scenario: both agents hold the same notes (written alike, so the same revisions), A and B
/// edit them apart, then they connect. B's config has the rule `[rule notes]` (`prefix = note:`,
/// `strategy = resolver notes`), so B offers each conflict to the resolver as A's revisions
/// arrive; A is `manual`, so it keeps its side of each conflict until B's resolution reaches it.
@Suite("resolver clients merge conflicts between two real agents", .serialized)
struct ResolverClientEndToEndTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// `Tools/examples/resolver.py` registered on `agent` as `name` (with `arguments` after it), its
    /// stdout and stderr in the pipe returned.
    static func pythonResolver(on agent: AgentProcess, name: String, arguments: [String] = []) throws -> (ChildProcess, Pipe) {
        let python = ChildProcess()
        python.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        python.arguments = ["python3", root.appendingPathComponent("Tools/examples/resolver.py").path, "--socket", agent.socketPath, "--name", name]
            + arguments
        let output = Pipe()
        python.standardOutput = output
        python.standardError = output
        try python.run()
        do {
            try poll("the Python resolver to register") {
                guard python.isRunning else { throw TimedOut(what: "resolver.py to register; it exited with \(python.terminationStatus)") }
                return try NotesScenario.resolverNames(agent) == [name]
            }
        } catch {
            python.terminate()
            throw error
        }
        return (python, output)
    }

    @available(macOS 15.0, *)
    @Test("the Swift ResolverClient on B merges the notes conflicts, answers carry ancestor, local_rev and node_id, and A converges to B's merge")
    func swiftClientMerges() async throws {
        let (a, b) = try NotesScenario.startAgents()
        let client = try ResolverClient(socketPath: b.socketPath, name: "notes", prefix: "note:")
        let offers = OfferLog()
        let running = Task(executorPreference: QueueExecutor.shared) {
            try await client.run { offer in
                offers.add(offer)
                return NotesScenario.merge(offer)
            }
        }
        try poll("notes to be registered on b") { try NotesScenario.resolverNames(b) == ["notes"] }
        let edits = try NotesScenario.editApartAndConnect(a, b)
        try NotesScenario.expectSettled(a, b, firstLeafText: { offers.firstLeafText(of: "note:2") })

        for (doc, localRevision) in edits.onB {
            let offered = offers.all.filter { $0.documentID == doc }
            #expect(offered.count == 1, "\(doc): \(offered.count) offers")
            guard let offer = offered.first else { continue }
            #expect(offer.resolver == "notes" && offer.rule == "notes" && offer.database == "default")
            #expect(offer.peer == a.nodeID, "\(doc) came from A")
            #expect(offer.conflict.localRevision?.description == localRevision, "\(doc): B's edit was current before")
            #expect(offer.conflict.commonAncestorBody == .object(NotesScenario.base[doc]!), "\(doc): the ancestor is the note both started from")
            #expect(offer.conflict.leaves.count == 2)
        }
        #expect(try NotesScenario.resolvedBy(b) == ["note:1": "notes", "note:2": "notes", "note:3": "notes"])
        #expect(client.counts == ResolverClient.Counts(offered: 3, answered: 3, refused: 0, unanswered: 0))

        running.cancel()
        await #expect(throws: CancellationError.self) { try await running.value }
        var answered: [String: String] = [:]
        for await outcome in client.outcomes {
            if case .answered(_, let doc, let revision) = outcome { answered[doc] = revision.description }
        }
        #expect(answered == (try NotesScenario.currentRevisions(b)), "each answer's response names the revision B now has")
        try poll("the resolver to be gone from b after the cancellation") { try NotesScenario.resolverNames(b).isEmpty }
    }

    @Test("the Python example resolver on B merges the notes conflicts, prints each answer, and exits 0 when B shuts down")
    func pythonResolverMerges() throws {
        let (a, b) = try NotesScenario.startAgents()
        let (python, output) = try Self.pythonResolver(on: b, name: "notes", arguments: ["--prefix", "note:"])
        defer { if python.isRunning { python.terminate() } }
        _ = try NotesScenario.editApartAndConnect(a, b)
        try NotesScenario.expectSettled(a, b, firstLeafText: { nil })
        #expect(try NotesScenario.resolvedBy(b) == ["note:1": "notes", "note:2": "notes", "note:3": "notes"])
        let current = try NotesScenario.currentRevisions(b)

        #expect(try b.ctl(["shutdown"]).status == 0)
        try waitForExit(python)
        let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(python.terminationStatus == 0, "\(printed)")
        #expect(printed.hasPrefix("registered notes: ids starting with 'note:'\n"), "\(printed)")
        for (doc, revision) in current.sorted(by: { $0.key < $1.key }) {
            #expect(printed.contains("answered \(doc) \(revision)\n"), "\(printed)")
        }
        #expect(!printed.contains("refused"), "\(printed)")
    }

    @Test("the Python example resolver answers a conflict of another database and names it db/doc")
    func pythonResolverOtherDatabase() throws {
        let agent = try AgentProcess()
        try agent.start()
        #expect(try agent.ctl(["db", "create", "archive", "--conflicts", "resolver keeper"]).status == 0)
        let (python, output) = try Self.pythonResolver(on: agent, name: "keeper")
        defer { if python.isRunning { python.terminate() } }
        let docs: [JSONValue] = [("a", 1), ("b", 2)].map { digit, value in
            .object(["_id": .string("old"), "_rev": .string("1-" + String(repeating: digit, count: 32)), "v": .int(Int64(value))])
        }
        #expect(try agent.client().request("import", ["db": .string("archive"), "docs": .array(docs)])["ok"] == .bool(true))
        var revision: String?
        try poll("the archive conflict to be settled") {
            let conflicts = try agent.client().request("conflicts", ["db": .string("archive")])["conflicts"]
            revision = try agent.client().request("get", ["db": .string("archive"), "doc": .string("old")])["doc"]?.objectValue?["_rev"]?.stringValue
            return conflicts == .array([])
        }
        #expect(try agent.ctl(["shutdown"]).status == 0)
        try waitForExit(python)
        let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(printed.contains("answered archive/old \(revision ?? "?")\n"), "\(printed)")
    }

    @available(macOS 15.0, *)
    @Test("a refused answer and a closure that throws come out as outcomes, and the agent keeps both conflicts")
    func refusalsAreReported() async throws {
        let agent = try AgentProcess(initArguments: ["--listen", "127.0.0.1:0", "--conflicts", "manual"])
        // The thrown offer is never answered; a timeout of an hour keeps the agent from offering
        // it again (after its timeout and backoff) while the test counts offers on a slow machine.
        try agent.appendConfig("[limits]\nresolver-timeout-seconds = 3600\n")
        try agent.start()
        for doc in ["note:refused", "note:thrown"] {
            #expect(try agent.ctl(["import", "-"], stdin: NotesScenario.conflictingImport(doc)).status == 0)
        }
        struct CannotMerge: Error {}
        let client = try ResolverClient(socketPath: agent.socketPath, name: "notes", prefix: "note:")
        let running = Task(executorPreference: QueueExecutor.shared) {
            try await client.run { offer in
                guard offer.documentID == "note:refused" else { throw CannotMerge() }
                return .keep(RevisionID("9-" + String(repeating: "0", count: 32))!)  // not an open leaf
            }
        }
        try poll("both offers to be settled by the client") {
            let counts = client.counts
            return counts.refused + counts.unanswered == 2
        }
        let second = try ResolverClient(socketPath: agent.socketPath, name: "notes")
        await #expect {
            try await second.run { _ in .delete }
        } throws: { error in
            guard case .registrationRefused(let failure)? = error as? ResolverClient.Failure else { return false }
            return failure.code == .failed
        }

        running.cancel()
        await #expect(throws: CancellationError.self) { try await running.value }
        var outcomes: [String: ResolverClient.Outcome] = [:]
        for await outcome in client.outcomes {
            switch outcome {
            case .answered(_, let doc, _), .refused(_, let doc, _), .unanswered(_, let doc, _): outcomes[doc] = outcome
            }
        }
        guard case .refused(_, _, let refusal)? = outcomes["note:refused"] else {
            Issue.record("no refusal for note:refused: \(outcomes)")
            return
        }
        #expect(refusal.code == .invalidArgument, "\(refusal)")
        guard case .unanswered(_, _, let error)? = outcomes["note:thrown"] else {
            Issue.record("note:thrown was not left unanswered: \(outcomes)")
            return
        }
        #expect(error is CannotMerge)
        #expect(client.counts == ResolverClient.Counts(offered: 2, answered: 0, refused: 1, unanswered: 1))
        guard case .array(let conflicts)? = try agent.client().request("conflicts")["conflicts"] else {
            Issue.record("no conflicts list")
            return
        }
        #expect(conflicts.count == 2, "both conflicts are kept")
    }
}

/// `ResolverClient`'s doc-comment example, word for word, so that it keeps compiling (never run:
/// the path is an example's).
@available(macOS 15.0, *)
private func resolverClientDocumentationExample() async throws {
    let client = try ResolverClient(socketPath: "/var/lib/canopy/admin.sock", name: "notes", prefix: "note:")
    let counts = try await client.run { offer in
        if offer.conflict.leaves.contains(where: \.isDeleted) { return .delete }
        return .keep(offer.conflict.leaves[0].revision)
    }
    print("answered \(counts.answered), refused \(counts.refused)")
}

/// The offers a resolver closure saw, shared between the resolver's task and the test.
private final class OfferLog: @unchecked Sendable {
    private let lock = NSLock()
    private var offers: [ResolverOffer] = []

    func add(_ offer: ResolverOffer) { lock.withLock { offers.append(offer) } }
    var all: [ResolverOffer] { lock.withLock { offers } }

    /// The `text` of the first (current) leaf of the offer for `doc`.
    func firstLeafText(of doc: String) -> JSONValue? {
        all.first { $0.documentID == doc }?.conflict.leaves.first?.body?.objectValue?["text"]
    }
}

/// Runs the resolver client's task on a Dispatch queue of its own rather than the cooperative
/// pool: the other end-to-end tests block pool threads while they wait for their agents, and an
/// offer not answered within the agent's `resolver-timeout-seconds` would be kept unmerged.
@available(macOS 15.0, *)
private final class QueueExecutor: TaskExecutor {
    static let shared = QueueExecutor()
    private let queue = DispatchQueue(label: "canopy.tests.resolver-client")

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

/// Agents A and B, the notes they start from, the edits made apart, and what each side must hold
/// once B's resolver has merged.
private enum NotesScenario {
    /// B's rule: conflicts in `note:` documents are kept for the resolver named `notes`.
    static let rule = "\n[rule notes]\nprefix = note:\nstrategy = resolver notes\n"

    /// The notes both agents start from (the common ancestor of each conflict).
    static let base: [String: [String: JSONValue]] = [
        "note:1": ["title": .string("groceries"), "text": .string("milk"), "pinned": .bool(false)],
        "note:2": ["title": .string("trip"), "text": .string("train")],
        "note:3": ["title": .string("old"), "text": .string("drop me")],
    ]

    /// note:1's merge: A changed `text`, B changed `title`.
    static let mergedNote1: JSONValue = .object(["title": .string("shopping"), "text": .string("milk, eggs"), "pinned": .bool(false)])

    /// A (`manual`) and B (with `rule`) running, each holding `base` at the same revisions.
    static func startAgents() throws -> (a: AgentProcess, b: AgentProcess) {
        let a = try AgentProcess(initArguments: ["--listen", "127.0.0.1:0", "--conflicts", "manual"])
        let b = try AgentProcess()
        let configPath = b.dataDir + "/canopy.conf"
        let config = try String(contentsOfFile: configPath, encoding: .utf8)
        try (config + rule).write(toFile: configPath, atomically: true, encoding: .utf8)
        try a.start()
        try b.start()
        for (doc, body) in base.sorted(by: { $0.key < $1.key }) {
            #expect(try a.put(doc, body) == b.put(doc, body), "the same note written alike has the same revision")
        }
        return (a, b)
    }

    /// Edits every note on A and on B, differently, then lets them replicate. Returns B's
    /// revision of each note after its edit (the offer's `local_rev`).
    static func editApartAndConnect(_ a: AgentProcess, _ b: AgentProcess) throws -> (onB: [String: String], onA: [String: String]) {
        let revisions = try currentRevisions(a)
        var onA: [String: String] = [:]
        var onB: [String: String] = [:]
        onA["note:1"] = try update(a, "note:1", ["title": .string("groceries"), "text": .string("milk, eggs"), "pinned": .bool(false)], revisions["note:1"]!)
        onB["note:1"] = try update(b, "note:1", ["title": .string("shopping"), "text": .string("milk"), "pinned": .bool(false)], revisions["note:1"]!)
        onA["note:2"] = try update(a, "note:2", ["title": .string("trip"), "text": .string("plane")], revisions["note:2"]!)
        onB["note:2"] = try update(b, "note:2", ["title": .string("trip"), "text": .string("boat")], revisions["note:2"]!)
        onA["note:3"] = try reply(a.client().request("delete", ["doc": .string("note:3"), "rev": .string(revisions["note:3"]!)]))
        onB["note:3"] = try update(b, "note:3", ["title": .string("old"), "text": .string("keep me")], revisions["note:3"]!)
        try a.allow(b)
        try b.allow(a)
        return (onB, onA)
    }

    /// Waits until B reports every note resolved (`conflict.resolved`) and checks what it holds,
    /// then waits until A holds the same revisions. `firstLeafText` is the text of note:2's
    /// current leaf in its offer, when the test saw it: both sides changed it, so the merge takes
    /// that leaf's (and the resolution keeps that leaf rather than writing a new revision).
    static func expectSettled(_ a: AgentProcess, _ b: AgentProcess, firstLeafText: () -> JSONValue?) throws {
        try poll("b to report every note resolved") { Set(try resolvedBy(b).keys).isSuperset(of: base.keys) }
        let leaves = try openLeaves(b)
        #expect(base.keys.allSatisfy { leaves[$0]?.revisions.count == 1 }, "one open leaf per note on b: \(leaves)")
        #expect(try documentBody(b, "note:1") == mergedNote1)
        let note2 = try documentBody(b, "note:2")?.objectValue
        #expect(note2?["title"] == .string("trip"))
        #expect(note2?["text"] == firstLeafText() ?? note2?["text"], "both sides changed text: the current leaf's value")
        #expect([.string("plane"), .string("boat")].contains(note2?["text"]), "\(String(describing: note2))")
        #expect(try openLeaves(b)["note:3"]?.deleted == true, "a deletion among the leaves: the note is deleted")
        #expect(try conflictCount(b) == 0)
        let merged = try currentRevisions(b)
        try poll("a to converge to b's merged revisions") {
            let onA = try currentRevisions(a)
            return base.keys.allSatisfy { onA[$0] == merged[$0] }
        }
        #expect(try conflictCount(a) == 0)
    }

    /// The three-way field merge the Python example makes too: a deleted leaf deletes; otherwise
    /// each field takes the first leaf's value (current first) that differs from the ancestor's,
    /// or the ancestor's when no leaf changed it.
    static func merge(_ offer: ResolverOffer) -> ResolutionDecision {
        let leaves = offer.conflict.leaves
        if leaves.contains(where: \.isDeleted) { return .delete }
        let ancestor = offer.conflict.commonAncestorBody?.objectValue ?? [:]
        let bodies = leaves.map { $0.body?.objectValue ?? [:] }
        var merged: [String: JSONValue] = [:]
        for field in Set(ancestor.keys).union(bodies.flatMap(\.keys)) {
            let value: JSONValue?
            if let side = bodies.first(where: { $0[field] != ancestor[field] }) { value = side[field] } else { value = ancestor[field] }
            merged[field] = value
        }
        return .merged(.object(merged))
    }

    /// Two generation-1 revisions of `doc` to import: a conflict the agent finds on import.
    static func conflictingImport(_ doc: String) -> String {
        let leaves = ["a", "b"].map { side in
            #"{"_id":"\#(doc)","_rev":"1-\#(String(repeating: side, count: 32))","side":"\#(side)"}"#
        }
        return #"{"docs":[\#(leaves.joined(separator: ","))],"new_edits":false}"#
    }

    // MARK: Reading the agents

    /// The names of the resolvers connected to `agent` (`status.resolvers`).
    static func resolverNames(_ agent: AgentProcess) throws -> [String] {
        guard case .array(let rows)? = try agent.client().request("status")["resolvers"] else { return [] }
        return rows.compactMap { row in
            if case .string(let name)? = row.objectValue?["name"] { return name }
            return nil
        }
    }

    /// Each document's open leaves and whether it is deleted, from the changes feed.
    static func openLeaves(_ agent: AgentProcess) throws -> [String: (revisions: [String], deleted: Bool)] {
        guard case .array(let rows)? = try agent.client().request("changes", ["limit": .int(1000)])["results"] else { return [:] }
        var leaves: [String: (revisions: [String], deleted: Bool)] = [:]
        for row in rows {
            guard let members = row.objectValue, case .string(let doc)? = members["doc"], case .array(let changes)? = members["changes"] else { continue }
            let revisions = changes.compactMap { change -> String? in
                if case .string(let rev)? = change.objectValue?["rev"] { return rev }
                return nil
            }
            leaves[doc] = (revisions, members["deleted"] == .bool(true))
        }
        return leaves
    }

    /// Each document's current revision (its first open leaf).
    static func currentRevisions(_ agent: AgentProcess) throws -> [String: String] {
        try openLeaves(agent).compactMapValues(\.revisions.first)
    }

    static func documentBody(_ agent: AgentProcess, _ doc: String) throws -> JSONValue? {
        guard var members = try agent.client().request("get", ["doc": .string(doc)])["doc"]?.objectValue else { return nil }
        members = members.filter { !$0.key.hasPrefix("_") }
        return .object(members)
    }

    static func conflictCount(_ agent: AgentProcess) throws -> Int {
        guard case .array(let rows)? = try agent.client().request("conflicts")["conflicts"] else { return -1 }
        return rows.count
    }

    /// `by` of each `conflict.resolved` event the agent still holds, by document.
    static func resolvedBy(_ agent: AgentProcess) throws -> [String: String] {
        let client = try agent.client()
        guard case .int(let last)? = try client.request("events", ["since": .int(0)])["last_seq"] else { return [:] }
        var resolved: [String: String] = [:]
        var seen: Int64 = 0
        while seen < last {
            guard let event = try client.readObject()["event"]?.objectValue else { continue }
            if case .int(let seq)? = event["seq"] { seen = seq }
            guard event["type"] == .string("conflict.resolved"), let data = event["data"]?.objectValue,
                case .string(let doc)? = data["doc"], case .string(let by)? = data["by"]
            else { continue }
            resolved[doc] = by
        }
        return resolved
    }

    private static func update(_ agent: AgentProcess, _ doc: String, _ body: [String: JSONValue], _ rev: String) throws -> String {
        try reply(agent.client().request("put", ["doc": .string(doc), "body": .object(body), "rev": .string(rev)]))
    }

    /// The `rev` of a successful write's response.
    private static func reply(_ response: [String: JSONValue]) throws -> String {
        guard case .string(let rev)? = response["rev"] else { throw TimedOut(what: "a write to succeed: \(response)") }
        return rev
    }
}
