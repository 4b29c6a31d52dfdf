import ArgumentParser
import CanopyAgent
import CanopyCore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

struct Sync: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Replicate once with a peer; --wait waits until both directions are caught up.",
        discussion: """
            With --wait, canopyctl says on stderr what it waits for, shows progress on a terminal, and
            exits 1 when the peer could not be reached in time (--timeout) or when documents the peer
            sent were refused (the count and the last reason are printed; `canopyctl peers` keeps them).
            """)
    @OptionGroup var connection: ConnectionOptions
    @Argument var nodeID: String
    @Flag(help: "Wait until the replication has finished.") var wait = false
    @Option(help: "With --wait: give up after this many seconds (exit 1). Default: wait as long as it takes.")
    var timeout: Double?

    func validate() throws {
        if let timeout, !(timeout > 0) { throw ValidationError("--timeout must be a positive number of seconds") }
        if timeout != nil && !wait { throw ValidationError("--timeout needs --wait") }
    }

    func run() throws {
        guard wait else {
            let result = try connection.call("sync", ["node_id": .string(nodeID), "wait": .bool(false)])
            return connection.json ? printJSON(.object(result)) : print("sync started with \(text(result["node_id"]))")
        }
        let peer = try peerRow()
        printError("waiting for \(describe(peer)) to be caught up in both directions"
            + (timeout.map { " (at most \(Self.seconds($0)))" } ?? ""))
        let showProgress = !connection.json && isatty(2) == 1
        if showProgress {
            // A second connection streams progress events while the first waits for the answer.
            let events = try connection.connect()
            _ = try connection.call(events, "events", [:])
            let target = nodeID
            Thread.detachNewThread { ProgressBar.follow(events, nodeID: target) }
        }
        let client: AdminSocketClient
        do {
            client = try AdminSocketClient(path: try connection.socketPath(), receiveTimeoutSeconds: timeout)
        } catch {
            throw CtlFailure(status: .unreachable, message: "agent not reachable: \(error) (is canopyd running?)")
        }
        let result: [String: JSONValue]
        do {
            result = try connection.call(client, "sync", ["node_id": .string(nodeID), "wait": .bool(true)])
        } catch let failure as CtlFailure where failure.timedOut {
            if showProgress { FileHandle.standardError.write(Data("\n".utf8)) }
            let now = (try? peerRow()).map(describe) ?? "the peer"
            throw CtlFailure(status: .error, message: "sync with \(nodeID) did not finish within \(Self.seconds(timeout ?? 0)): \(now)")
        }
        if showProgress { FileHandle.standardError.write(Data("\n".utf8)) }
        if connection.json { printJSON(.object(result)) } else {
            print("synced with \(text(result["node_id"])): \(text(result["completed"])) changes checked")
        }
        if case .int(let rejected)? = result["rejected"], rejected > 0 {
            throw CtlFailure(
                status: .error,
                message: "\(rejected) document\(rejected == 1 ? "" : "s") from \(text(result["node_id"])) refused during this sync"
                    + " (last: \(text(result["last_rejection"]))); `canopyctl peers` shows the count")
        }
    }

    /// The configured peer's row from `peers` (a usage error when it is not configured).
    private func peerRow() throws -> [String: JSONValue] {
        let peers = try connection.call("peers")
        let wanted = AgentIdentity.normalizeNodeID(nodeID) ?? nodeID
        guard case .array(let rows)? = peers["peers"],
            let row = rows.compactMap(\.objectValue).first(where: { $0["node_id"] == .string(wanted) })
        else {
            throw CtlFailure(status: .notFound, message: "\(nodeID) is not a configured peer (see `canopyctl peers`)")
        }
        return row
    }

    /// "NODE at ADDRESS (offline: last error)" for people.
    private func describe(_ peer: [String: JSONValue]) -> String {
        var line = text(peer["node_id"])
        if case .string(let address)? = peer["address"] { line += " at \(address)" } else { line += " (it connects to this node)" }
        line += ", \(text(peer["state"]))"
        if case .string(let error)? = peer["last_error"] { line += " (last error: \(error))" }
        return line
    }

    static func seconds(_ value: Double) -> String {
        value == value.rounded() ? "\(Int(value)) s" : "\(value) s"
    }
}

/// Draws `[#####.....] completed/total` on stderr from `sync.progress` events.
enum ProgressBar {
    static let width = 30

    static func follow(_ client: AdminSocketClient, nodeID: String) {
        while let line = try? client.readObject() {
            guard case .object(let event)? = line["event"], event["type"] == .string("sync.progress"),
                case .object(let data)? = event["data"],
                data["node_id"] == .string(AgentIdentity.normalizeNodeID(nodeID) ?? nodeID),
                case .int(let completed)? = data["completed"], case .int(let total)? = data["total"]
            else { continue }
            let filled = total > 0 ? Int(Int64(width) * min(completed, total) / total) : 0
            let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
            FileHandle.standardError.write(Data("\r[\(bar)] \(completed)/\(total)".utf8))
        }
    }
}

struct Events: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Stream events; --since N first replays those after N that the agent still holds.")
    @OptionGroup var connection: ConnectionOptions
    @Option(help: "Replay events after this sequence number.") var since: Int64?

    func run() throws {
        let client = try connection.connect()
        let result = try connection.call(client, "events", since.map { ["since": .int($0)] } ?? [:])
        if case .int(let missed)? = result["missed"], missed > 0 {
            printError("\(missed) events after \(since ?? 0) are no longer held by the agent")
        }
        while true {
            let line: [String: JSONValue]
            do { line = try client.readObject() } catch { return }
            guard case .object(let event)? = line["event"] else { continue }
            if connection.json {
                printJSON(.object(event))
            } else {
                let data = event["data"].map { CanonicalJSON.encode($0) }.map { String(decoding: $0, as: UTF8.self) } ?? "{}"
                print("\(text(event["seq"])) \(text(event["type"])) \(data)")
            }
            fflush(nil)
        }
    }
}

struct Import: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Import a CouchDB _bulk_docs body (new_edits false) from FILE or '-' for stdin.",
        discussion: """
            Without --couchdb the revisions are treated as received from a peer: the node's policy
            applies, so a deleted leaf next to a live one is a deletion and wins. Data exported from
            CouchDB needs --couchdb, which imports its settled (non-winning) deleted branches as closed.
            """)
    @OptionGroup var connection: ConnectionOptions
    @Argument var file: String
    @Flag(help: "The data came from CouchDB: settled deleted branches are imported as closed.") var couchdb = false

    /// Bytes of docs per request, safely under the agent's 1 MiB line limit.
    static let chunkBytesMax = 900 * 1024

    func run() throws {
        let docs = try Self.readDocs(file)
        let client = try connection.connect()
        var documents: Int64 = 0
        var added: Int64 = 0
        for chunk in try Self.chunks(docs) {
            let result = try connection.call(client, "import", ["docs": .array(chunk), "couchdb": .bool(couchdb)])
            if case .int(let count)? = result["documents"] { documents += count }
            if case .int(let count)? = result["revisions_added"] { added += count }
        }
        let summary: [String: JSONValue] = ["documents": .int(documents), "revisions_added": .int(added)]
        connection.json ? printJSON(.object(summary)) : print("imported \(documents) documents, \(added) new revisions")
    }

    static func readDocs(_ file: String) throws -> [JSONValue] {
        let body = try readBody(inline: nil, file: file)
        guard case .array(let docs)? = body.objectValue?["docs"] else {
            throw CtlFailure(status: .usage, message: "expected a _bulk_docs body: {\"docs\": [...]}")
        }
        return docs
    }

    /// Packs documents into requests, keeping every revision of one `_id` in the same request
    /// (so `--couchdb` sees all of a document's leaves at once).
    static func chunks(_ docs: [JSONValue]) throws -> [[JSONValue]] {
        var order: [String] = []
        var groups: [String: [JSONValue]] = [:]
        for doc in docs {
            let id = doc.objectValue?["_id"].map(text) ?? ""
            if groups[id] == nil { order.append(id) }
            groups[id, default: []].append(doc)
        }
        var chunks: [[JSONValue]] = []
        var current: [JSONValue] = []
        var bytes = 0
        for id in order {
            let group = groups[id]!
            let size = group.reduce(0) { $0 + CanonicalJSON.encode($1).count + 1 }
            guard size <= chunkBytesMax else {
                throw CtlFailure(status: .error, message: "document \(id.prefix(80)) is larger than \(chunkBytesMax) bytes")
            }
            if bytes + size > chunkBytesMax, !current.isEmpty {
                chunks.append(current)
                current = []
                bytes = 0
            }
            current.append(contentsOf: group)
            bytes += size
        }
        if !current.isEmpty { chunks.append(current) }
        return chunks
    }
}

struct Export: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print every document (all leaves, with history) as a CouchDB _bulk_docs body.")
    @OptionGroup var connection: ConnectionOptions

    func run() throws {
        let client = try connection.connect()
        var docs: [JSONValue] = []
        var since: Int64 = 0
        while true {
            let page = try connection.call(client, "export", ["since": .int(since), "limit": .int(1000)])
            if case .array(let items)? = page["docs"] { docs.append(contentsOf: items) }
            if case .int(let last)? = page["last_seq"] { since = last }
            if page["done"] != .bool(false) { break }
        }
        printJSON(.object(["docs": .array(docs), "new_edits": .bool(false)]))
    }
}
