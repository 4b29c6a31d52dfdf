/// One broken invariant.
public struct Violation: Sendable, Equatable, CustomStringConvertible {
    /// The simulation's invariants, numbered as in `Protocol/design.md` §7.2.
    public enum Invariant: String, Sendable {
        case convergence = "1 convergence (same current revision and open leaves everywhere)"
        case lostWrite = "2 no acknowledged write lost"
        case deletion = "3 deletions stay deleted unless revived"
        case checkpoint = "4 no checkpoint ahead of durable data"
        case conflicts = "5 conflicts settled (automatic) or kept (throwing resolver)"
        case determinism = "6 determinism (same seed, same trace)"
        case readAccess = "7 no document reaches a node that may not read it (multi-database runs)"
        case writeAccess = "8 no revision applied from a peer that may not write it (multi-database runs)"
        case attachments = "9 every node holds all the attachment content its leaves name, with the right digest (attachment runs)"
        case digests = "10 nodes holding the same documents and open leaves have equal database digests, and each digest is what its rows give"
    }

    /// Which invariant broke.
    public let invariant: Invariant
    /// The document concerned, when there is one.
    public let documentID: String?
    /// The nodes involved (indices).
    public let nodes: [Int]
    /// What exactly was wrong.
    public let detail: String

    public var description: String {
        let nodeList = nodes.map { "n\($0)" }.joined(separator: ",")
        return "invariant \(invariant.rawValue): document \(documentID ?? "-") nodes [\(nodeList)]: \(detail)"
    }
}

/// What a run did and found.
public struct SimulationReport: Sendable {
    /// The run's configuration (with the seed: everything needed to replay it).
    public let configuration: SimulationConfiguration
    /// Broken invariants; empty for a clean run.
    public let violations: [Violation]
    /// Virtual seconds from the heal to quiescence.
    public let convergeSeconds: Double
    /// Messages sent by all nodes.
    public let messages: Int
    /// Wire bytes of those messages.
    public let bytes: Int
    /// Revisions carried by `revisions` messages.
    public let revisionsTransferred: Int
    /// Acknowledged writes.
    public let writes: Int
    /// Injected faults by name.
    public let faults: [String: Int]
    /// The races the run went through, by name: works submitted while another of the same worker
    /// was outstanding (`overlapped`), completions that overtook an earlier work's (`reordered`),
    /// connections closed by the simultaneous-connect rule (`simultaneousConnect`).
    public let races: [String: Int]
    /// What the resolver clients and their nodes did, by name (`rules` runs; empty otherwise):
    /// offers sent, answers written and refused, offers timed out, connections ended, answers
    /// sent wrong and offers let time out on purpose, scans.
    public let resolvers: [String: Int]
    /// What the shares did in a multi-database run, by name (empty otherwise): document events
    /// by kind (`pulled`, `rejected`, …), attaches refused (`refusedAttach`), written revisions
    /// kept from nodes holding their database by the shares (`withheld`), `databases`.
    public var sharing: [String: Int] = [:]
    /// The trace hash (invariant 6 compares it between runs).
    public let traceHash: String
    /// The traced document's history, when one was asked for.
    public let documentLines: [String]

    /// Revisions transferred per acknowledged write.
    public var revisionsPerChange: Double { writes == 0 ? 0 : Double(revisionsTransferred) / Double(writes) }

    /// One line per run, for the tool and for test failures.
    public var summary: String {
        let c = configuration
        let faultList = faults.keys.sorted().map { "\($0)=\(faults[$0]!)" }.joined(separator: " ")
        let raceList = races.keys.sorted().map { "\($0)=\(races[$0]!)" }.joined(separator: " ")
        let resolverList = resolvers.isEmpty ? "" : "resolver [" + resolvers.keys.sorted().map { "\($0)=\(resolvers[$0]!)" }.joined(separator: " ") + "], "
        let sharingList = sharing.isEmpty ? "" : "sharing [" + sharing.keys.sorted().map { "\($0)=\(sharing[$0]!)" }.joined(separator: " ") + "], "
        return "seed \(c.seed) \(c.topology.rawValue)/\(c.nodes) \(c.policy.rawValue) faults=\(c.faults.rawValue) "
            + "revsLimit=\(c.revsLimit) batch=\(c.batchSize)x\(c.window): converged in \(SimulationTrace.format(convergeSeconds)) after heal, "
            + "\(writes) writes, \(messages) messages, \(bytes) bytes, "
            + "\(String(format2: revisionsPerChange)) revisions/change, faults [\(faultList)], races [\(raceList)], \(resolverList)\(sharingList)trace \(traceHash.prefix(16))"
    }

    /// The failure text: seed, invariant, document, nodes and the command that reproduces it.
    public var failureText: String {
        var lines = ["VIOLATION seed \(configuration.seed):"]
        lines += violations.prefix(20).map { "  \($0)" }
        if violations.count > 20 { lines.append("  … and \(violations.count - 20) more") }
        var reproduce = configuration
        if reproduce.traceDocument == nil { reproduce.traceDocument = violations.compactMap(\.documentID).first }
        lines.append("reproduce: \(reproduce.commandLine)")
        return lines.joined(separator: "\n")
    }
}

extension String {
    /// `value` with two decimals (no Foundation formatting needed).
    init(format2 value: Double) {
        let hundredths = Int64((value * 100).rounded())
        let fraction = String(hundredths % 100)
        self = "\(hundredths / 100).\(fraction.count == 1 ? "0" : "")\(fraction)"
    }
}
