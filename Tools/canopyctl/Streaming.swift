import ArgumentParser
import CanopyAgent
import CanopyCore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

struct Sync: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Replicate once with a peer; --wait waits for the end and shows progress on a terminal.")
    @OptionGroup var connection: ConnectionOptions
    @Argument var nodeID: String
    @Flag(help: "Wait until the replication has finished.") var wait = false

    func run() throws {
        let showProgress = wait && !connection.json && isatty(2) == 1
        if showProgress {
            // A second connection streams progress events while the first waits for the answer.
            let events = try connection.connect()
            _ = try connection.call(events, "events", [:])
            let target = nodeID
            Thread.detachNewThread { ProgressBar.follow(events, nodeID: target) }
        }
        let result = try connection.call("sync", ["node_id": .string(nodeID), "wait": .bool(wait)])
        if showProgress { FileHandle.standardError.write(Data("\n".utf8)) }
        if connection.json { return printJSON(.object(result)) }
        if wait {
            print("synced with \(text(result["node_id"])): \(text(result["completed"])) changes")
        } else {
            print("sync started with \(text(result["node_id"]))")
        }
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
