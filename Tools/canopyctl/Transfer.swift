import ArgumentParser
import CanopyAdmin
import CanopyAgent
import CanopyCore
import CanopyStore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

struct Import: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Load a CouchDB _bulk_docs body from FILE or '-' (stdin), streaming it in batches.",
        discussion: """
            With "new_edits": false in the body (what `canopyctl export` and CouchDB replication dumps
            write), every entry is a revision with its history, kept with its revision id; the node's
            conflict policy settles the conflicts they leave. --couchdb reads CouchDB's settled deleted
            branches as closed and keeps CouchDB's open conflicts as they are (each document reads as
            CouchDB showed it, _conflicts included); --conflicts keep|settle says otherwise.
            Without it (CouchDB's default), every entry is a new revision of its _id: _rev names the
            revision it replaces, _deleted: true deletes; a stale entry is a conflict, listed on stderr
            (exit 3), and the others are written. --new-edits overrides the body. Each batch is one
            transaction; a bad entry stops the import there, naming it (earlier batches stay written).
            The members may come in any order, pretty-printed or on one line.
            """)
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var database: DatabaseOption
    @Argument(help: "The file, or '-' for stdin.") var file: String
    @Flag(help: "The data came from CouchDB: settled deleted branches are imported as closed, open conflicts kept.") var couchdb = false
    @Option(help: "keep: the conflicts the revisions leave stay as they came; settle: the node's conflict policy settles them. Default: keep with --couchdb, else settle.")
    var conflicts: ImportConflicts?
    @Option(help: "true: new revisions; false: revisions as they are. Default: the body's \"new_edits\" (true when absent).")
    var newEdits: Bool?

    func run() throws {
        let input = try ImportInput(path: file)
        do {
            let mode = try newEdits ?? input.newEditsMember() ?? true
            if couchdb && mode {
                throw CtlFailure(status: .usage, message: "--couchdb applies to revisions as they are (\"new_edits\": false)")
            }
            if conflicts != nil && mode {
                throw CtlFailure(status: .usage, message: "--conflicts applies to revisions as they are (\"new_edits\": false): new revisions make no conflict")
            }
            var loader = try BatchLoader(
                connection: connection, database: database.db, newEdits: mode, couchdb: couchdb, conflicts: conflicts, totalBytes: input.size)
            var splitter = BulkDocsSplitter(elementBytesMax: AgentLimits.adminLineBytesMax - BatchLoader.envelopeBytes)
            try input.forEachChunk { chunk in
                try splitter.feed(chunk, element: { try loader.add($0) }, member: { _, _ in })
                loader.bytesRead += chunk.count
                loader.showProgress(final: false)
            }
            try splitter.finish()
            try loader.finish()
        } catch let problem as BulkDocsSplitter.Problem {
            throw CtlFailure(status: .usage, message: "\(file == "-" ? "stdin" : file): \(problem)" + (problem.isAllDocsResponse ? Self.allDocsAdvice : ""))
        }
    }

    /// How to turn an `_all_docs` response into a body this command reads.
    static let allDocsAdvice = """
        ; fetch it with include_docs=true and import its rows' documents as {"new_edits": false, "docs": [ROW.doc, …]}, \
        e.g. curl -s 'http://HOST:5984/DB/_all_docs?include_docs=true' | jq '{new_edits: false, docs: [.rows[].doc]}' | canopyctl import --couchdb -
        """
}

extension ImportConflicts: ExpressibleByArgument {}

/// Sends documents to the agent in batches (one transaction each), one request in flight while
/// the next batch is read, and reports progress.
struct BatchLoader {
    /// Bytes of a batch before it is sent; a batch also ends at `documentsPerBatch`.
    static let batchBytes = 4 << 20
    static let documentsPerBatch = 2000
    /// Room for the request around the documents.
    static let envelopeBytes = 4096

    let connection: ConnectionOptions
    let client: AdminSocketClient
    /// The database written, already checked by the agent when the first batch arrives.
    let database: String
    let newEdits: Bool
    let couchdb: Bool
    /// What the agent does with the conflicts an import leaves; nil: its default.
    let importConflicts: ImportConflicts?
    let totalBytes: Int?
    var bytesRead = 0
    private var batch: [[UInt8]] = []
    private var batchSize = 0
    private var batchID: String?
    private var inFlight: (id: Int64, first: Int, count: Int)?
    private var nextID: Int64 = 1
    private var sent = 0
    private var documents: Int64 = 0
    private var revisionsAdded: Int64 = 0
    private var written: Int64 = 0
    private var conflicts: [String] = []
    private var conflictCount: Int64 = 0
    private var lastProgress = 0.0
    private let terminal = isatty(2) == 1

    init(connection: ConnectionOptions, database: String, newEdits: Bool, couchdb: Bool, conflicts: ImportConflicts?, totalBytes: Int?) throws {
        self.connection = connection
        self.client = try connection.connect()
        self.database = database
        self.newEdits = newEdits
        self.couchdb = couchdb
        self.importConflicts = conflicts
        self.totalBytes = totalBytes
    }

    /// Adds one document's bytes; sends the batch when it is full. With `--couchdb` a batch never
    /// separates entries of one `_id` that follow each other (CouchDB's and Canopy's exports
    /// list a document's revisions together; all of them are needed to tell CouchDB's winner).
    mutating func add(_ element: [UInt8]) throws {
        var id: String?
        if couchdb, case .object(let members)? = try? JSONValue.parse(element), case .string(let text)? = members["_id"] {
            id = text
        }
        let sameDocument = id != nil && id == batchID
        if !batch.isEmpty && !sameDocument
            && (batchSize + element.count > Self.batchBytes || batch.count >= Self.documentsPerBatch)
        {
            try send()
        }
        guard batchSize + element.count + Self.envelopeBytes <= AgentLimits.adminLineBytesMax else {
            throw CtlFailure(status: .error, message: "the revisions of \(id.map { "\"\($0.prefix(80))\"" } ?? "a document") at entry \(sent + batch.count) exceed \(AgentLimits.adminLineBytesMax) bytes together")
        }
        batch.append(element)
        batchSize += element.count + 1
        batchID = id
    }

    /// Sends the batch as one request, first collecting the answer to the previous one.
    private mutating func send() throws {
        var command = Admin.BulkDocuments(db: database, docs: [])
        command.newEdits = newEdits
        if !newEdits {
            command.couchdb = couchdb
            command.conflicts = importConflicts
        }
        let line = AdminRequestLine.encode(command, id: nextID, encodedDocs: batch)
        do { try client.sendLine(line) } catch { throw CtlFailure(status: .error, message: "\(error)") }
        try collect()
        inFlight = (nextID, sent, batch.count)
        nextID += 1
        sent += batch.count
        batch = []
        batchSize = 0
    }

    /// Waits for the answer to the request in flight and adds it up.
    private mutating func collect() throws {
        guard let pending = inFlight else { return }
        inFlight = nil
        var response: [String: JSONValue]
        reading: while true {
            do { response = try client.readObject() } catch { throw CtlFailure(status: .error, message: "\(error)") }
            switch try? AdminLine.read(response) {
            case .response(let id, _)? where id == pending.id: break reading
            // An answer without an id is to a request the agent could not read at all: never
            // one to wait past (it is this one's, the only request in flight).
            case .refusal?, .other?, nil: break reading
            case .response?, .event?, .offer?, .upload?: continue
            }
        }
        let reply: Admin.BulkDocuments.Reply
        switch AdminResponseLine.reply(to: Admin.BulkDocuments.self, from: response) {
        case .success(let answer): reply = answer
        case .failure(let failure):
            throw CtlFailure(
                status: .error,
                message: "entries \(pending.first)–\(pending.first + pending.count - 1) were not written: \(failure.message)"
                    + (pending.first > 0 ? " (the \(pending.first) entries before them are written)" : ""),
                errorObject: try? JSONValueEncoder().encode(failure))
        }
        switch reply {
        case .written(let written):
            self.written += written.written
            for row in written.results where row.error != nil {
                conflictCount += 1
                if conflicts.count < 20 { conflicts.append("\(row.id): \(row.reason ?? "")") }
            }
        case .imported(let imported):
            documents += imported.documents
            revisionsAdded += imported.revisionsAdded
        }
    }

    /// Progress at most once a second: a bar on a terminal, JSON lines on stderr with --json.
    mutating func showProgress(final: Bool) {
        let now = Date().timeIntervalSince1970
        guard final || now - lastProgress >= 1 else { return }
        lastProgress = now
        let done = sent + batch.count
        if connection.json {
            let progress: JSONValue = .object([
                "progress": .object([
                    "entries": .int(Int64(done)), "bytes": .int(Int64(bytesRead)),
                    "total_bytes": totalBytes.map { .int(Int64($0)) } ?? .null,
                ]),
            ])
            FileHandle.standardError.write(Data(CanonicalJSON.encode(progress) + [UInt8(ascii: "\n")]))
        } else if terminal {
            let total = totalBytes.map { String(format: " of %.1f", Double($0) / 1_048_576) } ?? ""
            let line = String(format: "\rread %d entries (%.1f%@ MiB)", done, Double(bytesRead) / 1_048_576, total)
            FileHandle.standardError.write(Data(line.utf8))
            if final { FileHandle.standardError.write(Data("\n".utf8)) }
        }
    }

    /// Sends what is left, waits for the last answer and prints the summary.
    mutating func finish() throws {
        if !batch.isEmpty { try send() }
        try collect()
        showProgress(final: true)
        if newEdits {
            let summary: [String: JSONValue] = ["written": .int(written), "conflicts": .int(conflictCount)]
            connection.json ? printJSON(.object(summary)) : print("wrote \(counted(written, "document")), \(counted(conflictCount, "conflict"))")
            if conflictCount > 0 {
                for line in conflicts { printError("conflict: \(line)") }
                throw CtlFailure(
                    status: .conflict,
                    message: "\(conflictCount) entr\(conflictCount == 1 ? "y was" : "ies were") stale and not written"
                        + (conflictCount > 20 ? " (the first 20 are listed)" : ""))
            }
        } else {
            let summary: [String: JSONValue] = ["documents": .int(documents), "revisions_added": .int(revisionsAdded)]
            connection.json ? printJSON(.object(summary)) : print("imported \(counted(documents, "document")), \(counted(revisionsAdded, "new revision"))")
        }
    }
}

struct Export: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print every document (all leaves, with history) as a CouchDB _bulk_docs body.",
        discussion: """
            The body is written as it is read, page by page (at most 4 MiB each, a heavily edited
            document split across pages by leaf), so an export of any size completes in bounded
            memory. It starts with "new_edits": false, so `canopyctl export | canopyctl import -`
            streams. On a terminal, progress goes to stderr. A document damaged in the node's file is
            left out, named on stderr, and makes the command exit 1 once everything else is written.
            """)
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var database: DatabaseOption
    @Flag(help: "Write each attachment's content inline (base64 data), as CouchDB's attachments=true does; without it, stubs only.")
    var attachments = false

    func run() throws {
        let client = try connection.connect()
        // The database's update sequence is the progress total.
        let total = (try? connection.call(client, Admin.ListDatabases()))?.reply.databases.first { $0.db == database.db }?.counts.updateSeq
        let terminal = isatty(2) == 1
        let output = FileHandle.standardOutput
        output.write(Data(#"{"new_edits":false,"docs":["#.utf8))
        var since: Int64 = 0
        var skip: Int64 = 0
        var count = 0
        var lastProgress = 0.0
        var damaged: [Admin.DamageRow] = []
        while true {
            let command = Admin.ExportDocuments(db: database.db, since: since, limit: 1000, skipLeaves: skip > 0 ? skip : nil, attachments: attachments)
            let page = try connection.call(client, command).reply
            var bytes: [UInt8] = []
            for item in page.docs {
                if count > 0 { bytes.append(UInt8(ascii: ",")) }
                bytes += CanonicalJSON.encode(item)
                count += 1
            }
            output.write(Data(bytes))
            damaged += page.damaged
            since = page.lastSeq
            skip = page.nextLeaf ?? 0
            let now = Date().timeIntervalSince1970
            if terminal, now - lastProgress >= 1 {
                lastProgress = now
                FileHandle.standardError.write(Data("\rexported \(count) revisions (sequence \(since) of \(total.map(String.init) ?? "-"))".utf8))
            }
            if page.done { break }
        }
        output.write(Data("]}\n".utf8))
        if terminal { FileHandle.standardError.write(Data("\rexported \(count) revisions\n".utf8)) }
        guard damaged.isEmpty else {
            // The body written holds everything else; the damaged documents are named, and the
            // exit status says the export is not whole.
            for row in damaged {
                let revision = row.rev.map { " revision \($0)" } ?? ""
                FileHandle.standardError.write(Data("damaged, not exported: \"\(row.doc)\"\(revision): \(row.reason)\n".utf8))
            }
            throw CtlFailure(
                status: .error,
                message: "\(damaged.count) damaged \(damaged.count == 1 ? "entry was" : "entries were") left out of the export; run `canopyctl check` and restore the data directory from a backup (Tools/canopyd/README.md, Backups)")
        }
    }
}

/// `count` and `noun`, plural unless the count is 1: "1 document", "2 documents".
private func counted(_ count: Int64, _ noun: String) -> String {
    "\(count) \(noun)\(count == 1 ? "" : "s")"
}
