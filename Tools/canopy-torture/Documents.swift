import ArgumentParser
import CanopyAdmin
import CanopyAgent
import CanopyCore
import Foundation

/// Reading an agent's documents back through its admin socket, to compare agents with each other
/// and with what was written.
enum Documents {
    /// Every leaf the agent holds (`export`, page by page), as canonical JSON text keyed by nothing:
    /// the exact bytes of each entry without its `_revisions` history.
    static func leaves(_ agent: TortureAgent) throws -> [[String: JSONValue]] {
        let client = try agent.client(timeout: 120)
        var since: Int64 = 0
        var skip: Int64 = 0
        var leaves: [[String: JSONValue]] = []
        while true {
            let page = try agent.call(Admin.ExportDocuments(since: since, limit: 1000, skipLeaves: skip > 0 ? skip : nil), on: client)
            leaves += page.docs.compactMap(\.objectValue)
            since = page.lastSeq
            skip = page.nextLeaf ?? 0
            if page.done { return leaves }
        }
    }

    /// A leaf as comparable text: its id, revision and body (every member but `_revisions`).
    static func fingerprint(_ leaf: [String: JSONValue]) -> String {
        var members = leaf
        members["_revisions"] = nil
        return String(decoding: CanonicalJSON.encode(.object(members)), as: UTF8.self)
    }

    /// Each document's current revision (with a mark when deleted), from the changes feed.
    static func currentRevisions(_ agent: TortureAgent) throws -> [String: String] {
        let client = try agent.client(timeout: 120)
        var since: Int64 = 0
        var current: [String: String] = [:]
        while true {
            let page = try agent.call(Admin.Changes(since: since, limit: 100_000), on: client)
            for row in page.results {
                current[row.doc] = row.changes.map(\.rev.description).joined(separator: ",") + (row.deleted == true ? " deleted" : "")
            }
            guard !page.results.isEmpty, page.lastSeq > since else { return current }
            since = page.lastSeq
        }
    }

    /// True when `rev` ("N-HASH") is the document's current revision or in its history, as the
    /// agent's `get` with `revs` shows it.
    static func history(_ document: [String: JSONValue], contains rev: String) -> Bool {
        if document["_rev"] == .string(rev) { return true }
        guard let revisions = document["_revisions"]?.objectValue, case .int(let start)? = revisions["start"],
            case .array(let ids)? = revisions["ids"], let dash = rev.firstIndex(of: "-"),
            let generation = Int64(rev[..<dash])
        else { return false }
        let index = Int(start - generation)
        guard index >= 0, index < ids.count else { return false }
        return ids[index] == .string(String(rev[rev.index(after: dash)...]))
    }
}

/// Options every subcommand takes.
struct CommonOptions: ParsableArguments {
    @Option(name: .customLong("bin-dir"), help: "Where canopyd and canopyctl are (default: next to canopy-torture).")
    var binDir: String?
    @Option(help: "Seed of every random choice (kill moments, flipped bytes, writes).")
    var seed: UInt64 = 1
    @Flag(help: "Print the figures as JSON.")
    var json = false
    @Flag(help: "A short fixed slice instead of the full experiment (as the test suite runs it).")
    var quick = false
    @Flag(help: "Keep the temporary directories (data directories and agent logs) for inspection.")
    var keep = false

    func binaries() throws -> Binaries {
        Cleanup.shared.keepDirectories = keep
        return try Binaries(directory: binDir)
    }

    /// Progress lines go to stderr, so that stdout holds only the report.
    func progress(_ line: String) {
        FileHandle.standardError.write(Data("canopy-torture: \(line)\n".utf8))
    }
}

/// Log lines an agent wrote per minute over an interval: `lines` added during `seconds`.
func linesPerMinute(_ lines: Int, over seconds: Double) -> Double {
    seconds > 0 ? Double(lines) * 60 / seconds : 0
}
