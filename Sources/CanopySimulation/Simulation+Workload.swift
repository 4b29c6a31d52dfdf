import CanopyCore
import CanopyStore
import Foundation

/// The seeded workload: what the applications on the nodes write during the fault phase.
///
/// Operations, drawn one at a time at exponentially spaced moments from the workload stream:
///
///     create      a document id from the pool that the node does not hold (two nodes may create
///                 the same id concurrently: a conflict between unrelated branches)
///     update      a new revision on the node's current one
///     delete      a deletion of the node's current live revision
///     recreate    a new revision on a deleted document (a child of its tombstone)
///     hot         2–3 nodes update one of the three "hot" documents at the same instant
///     chain       one node makes 8–30 consecutive edits (long chains against short ones;
///                 with a small revsLimit they outrun stemming)
///     identical   two nodes that hold the same current revision write the same body on it
///                 (same content address: no conflict must appear)
///     attach      (with `attachments`) a new revision naming new content of 1 byte to 600 KiB,
///                 or one in four times content the node attached before, or one in four of
///                 the rest one of three contents every node attaches (shared content)
///
/// Each operation writes in one database of the node, drawn among those it holds (with several
/// databases; `hot` and `identical` then involve the nodes holding it). Only a running node
/// writes (a crashed or paused process takes no writes).
extension Simulation {
    enum Operation: CaseIterable {
        case create, update, delete, recreate, hot, chain, identical, attach
    }

    func scheduleWorkload(until end: Double) {
        var time = 0.05
        var moments: [Double] = []
        while true {
            time += exponential(mean: configuration.meanSecondsBetweenWrites, &workloadRandom)
            guard time < end else { break }
            moments.append(time)
        }
        for moment in moments {
            scheduler.schedule(after: moment - scheduler.now) { [weak self] in self?.performRandomOperation() }
        }
    }

    private func performRandomOperation() {
        var weights: [(Operation, UInt64)] = [(.create, 6), (.update, 10), (.delete, 3), (.recreate, 2), (.hot, 3), (.chain, 1), (.identical, 2)]
        if configuration.attachments { weights.append((.attach, 4)) }
        var pick = workloadRandom.next(below: weights.map(\.1).reduce(0, +))
        var operation = Operation.update
        for (candidate, weight) in weights {
            if pick < weight { operation = candidate; break }
            pick -= weight
        }
        let node = nodes[workloadRandom.index(below: nodes.count)]
        let database = node.databases.count == 1 ? node.databases[0] : node.databases[workloadRandom.index(below: node.databases.count)]
        guard node.isRunning, let store = node.stores[database] else { return }
        let target = Target(node: node, database: database, store: store)
        do {
            switch operation {
            case .create: try create(target)
            case .update: try update(target, documentID: documentID(workloadRandom.index(below: configuration.documents)))
            case .delete: try deleteSomething(target)
            case .recreate: try recreateSomething(target)
            case .hot:
                let id = documentID(workloadRandom.index(below: min(3, configuration.documents)))
                let holders = nodes.filter { $0.isRunning && $0.stores[database] != nil }
                let writers = workloadRandom.shuffled(holders).prefix(2 + workloadRandom.index(below: 2))
                for writer in writers.sorted(by: { $0.index < $1.index }) {
                    if let writerStore = writer.stores[database] { try update(Target(node: writer, database: database, store: writerStore), documentID: id) }
                }
            case .chain:
                let id = documentID(workloadRandom.index(below: configuration.documents))
                for _ in 0..<(8 + workloadRandom.index(below: 23)) { try update(target, documentID: id) }
            case .identical: try identicalEdit(in: database)
            case .attach: try attach(target, documentID: documentID(workloadRandom.index(below: configuration.documents)))
            }
        } catch {
            trace.record("n\(node.index) write failed: \(error)")
        }
    }

    /// A node's store of one database, where an operation writes.
    struct Target {
        let node: SimulationNode
        let database: DatabaseName
        let store: DocumentStore
    }

    /// `doc-NNN`; under the `rules` policy the prefix cycles through `SimulationRules.prefixes`;
    /// with several databases, through `ShareTable.prefixes` (so prefixed shares cover part of
    /// the pool).
    public func documentID(_ number: Int) -> String {
        let digits = String(number)
        let prefix: String
        if configuration.policy == .rules {
            prefix = SimulationRules.prefixes[number % SimulationRules.prefixes.count]
        } else if isMultiDatabase {
            prefix = ShareTable.prefixes[number % ShareTable.prefixes.count]
        } else {
            prefix = "doc-"
        }
        return prefix + String(repeating: "0", count: max(0, 3 - digits.count)) + digits
    }

    /// A new body for `id`; a `typ-` document's says `type: note` (or, one time in four, `memo`).
    private func nextBody(_ node: SimulationNode, for id: String) -> JSONValue {
        nextBodyNumber += 1
        let field = "f\(workloadRandom.index(below: 4))"
        var members: [String: JSONValue] = ["by": .string(node.name), "n": .int(nextBodyNumber), field: .int(Int64(workloadRandom.index(below: 1000)))]
        if id.hasPrefix("typ-") { members["type"] = .string(workloadRandom.chance(1, in: 4) ? "memo" : "note") }
        return .object(members)
    }

    private func current(_ store: DocumentStore, _ id: String) throws -> Document? {
        do {
            return try store.get(id: id)
        } catch .notFound {
            return nil
        }
    }

    private func create(_ target: Target) throws {
        let id = documentID(workloadRandom.index(below: configuration.documents))
        guard try current(target.store, id) == nil else { return try update(target, documentID: id) }
        let revision = try target.store.put(id: id, body: nextBody(target.node, for: id), replacing: nil)
        acknowledge(target, documentID: id, revision: revision, deletion: false)
    }

    private func acknowledge(_ target: Target, documentID: String, revision: RevisionID, deletion: Bool) {
        acknowledge(node: target.node.index, database: target.database, documentID: documentID, revision: revision, deletion: deletion)
    }

    /// Updates `id` on its current revision (creating it when absent, re-creating when deleted).
    private func update(_ target: Target, documentID id: String) throws {
        let document = try current(target.store, id)
        let parent = document.flatMap { $0.isDeleted ? nil : $0.revision }
        let revision = try target.store.put(id: id, body: nextBody(target.node, for: id), replacing: parent)
        acknowledge(target, documentID: id, revision: revision, deletion: false)
    }

    private func deleteSomething(_ target: Target) throws {
        let id = documentID(workloadRandom.index(below: configuration.documents))
        guard let document = try current(target.store, id), !document.isDeleted else { return }
        let revision = try target.store.delete(id: id, rev: document.revision)
        acknowledge(target, documentID: id, revision: revision, deletion: true)
    }

    private func recreateSomething(_ target: Target) throws {
        let id = documentID(workloadRandom.index(below: configuration.documents))
        guard let document = try current(target.store, id), document.isDeleted else { return }
        let revision = try target.store.put(id: id, body: nextBody(target.node, for: id), replacing: nil)
        acknowledge(target, documentID: id, revision: revision, deletion: false)
    }

    /// Writes a revision of `id` naming content stored on `node` first: new content drawn from
    /// the workload stream, or (one time in four) content the node attached before, or (one time
    /// in four of the rest) one of `sharedContentSeeds`' contents, which every node attaches: a
    /// node then stores, by its own upload, content that a revision it received from a peer may
    /// be set aside for (what real agents attaching the same files do).
    private func attach(_ target: Target, documentID id: String) throws {
        let (node, store) = (target.node, target.store)
        let stub: AttachmentMetadata
        if let earlier = attachedContent[node.index], workloadRandom.chance(1, in: 4), store.attachments.contains(earlier.digest) {
            stub = earlier
        } else if workloadRandom.chance(1, in: 4) {
            let shared = Self.sharedContentSeeds[workloadRandom.index(below: Self.sharedContentSeeds.count)]
            stub = try upload(Self.content(seed: shared.seed, count: shared.count), to: store)
        } else {
            let seed = workloadRandom.next()
            stub = try upload(Self.content(seed: seed, count: 1 + workloadRandom.index(below: 600 << 10)), to: store)
            attachedContent[node.index] = stub
        }
        let document = try current(store, id)
        let parent = document.flatMap { $0.isDeleted ? nil : $0.revision }
        let body = Attachments.body(nextBody(node, for: id), with: ["file": stub])
        let revision = try store.put(id: id, body: body, replacing: parent)
        acknowledge(target, documentID: id, revision: revision, deletion: false)
    }

    /// The contents every node may attach, as (seed, length): a few bytes, one part, two parts.
    static let sharedContentSeeds: [(seed: UInt64, count: Int)] = [(0x5EED_0001, 5), (0x5EED_0002, 10 << 10), (0x5EED_0003, 300 << 10)]

    /// `count` bytes drawn from `seed`.
    static func content(seed: UInt64, count: Int) -> [UInt8] {
        var content = SplitMix64(seed: seed)
        var bytes = [UInt8](repeating: 0, count: count)
        for index in bytes.indices { bytes[index] = UInt8(truncatingIfNeeded: content.next()) }
        return bytes
    }

    /// Stores `bytes` as an upload on `store` and returns the stub naming it.
    private func upload(_ bytes: [UInt8], to store: DocumentStore) throws -> AttachmentMetadata {
        let upload = try store.attachments.beginUpload(length: Int64(bytes.count), from: "the workload")
        try bytes.withUnsafeBytes { try upload.write($0) }
        let stored = try upload.finish()
        return AttachmentMetadata(contentType: "application/octet-stream", length: stored.length, digest: stored.digest, revpos: 1)
    }

    /// Two running nodes with the same current revision of a document of `database` write the
    /// same body on it.
    private func identicalEdit(in database: DatabaseName) throws {
        let id = documentID(workloadRandom.index(below: configuration.documents))
        let running = nodes.filter(\.isRunning)
        var byRevision: [RevisionID: [SimulationNode]] = [:]
        for node in running {
            if let store = node.stores[database], let document = try current(store, id), !document.isDeleted {
                byRevision[document.revision, default: []].append(node)
            }
        }
        guard let (revision, holders) = byRevision.filter({ $0.value.count >= 2 }).min(by: { $0.key < $1.key }) else { return }
        nextBodyNumber += 1
        let body: JSONValue = .object(["same": .int(nextBodyNumber)])
        for node in holders.prefix(2) {
            guard let store = node.stores[database] else { continue }
            let written = try store.put(id: id, body: body, replacing: revision)
            acknowledge(node: node.index, database: database, documentID: id, revision: written, deletion: false)
        }
    }
}

/// An exponentially distributed delay with the given mean, from a uniform draw.
func exponential(mean: Double, _ random: inout SplitMix64) -> Double {
    let unit = Double(random.next() >> 11) * 0x1p-53
    return -mean * log(1 - unit)
}

