import ArgumentParser
import CanopyAdmin
import CanopyAgent
import CanopyCore
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

struct Attach: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Attach a file to a document: a new revision with the attachment added or replaced.",
        discussion: """
            The file is streamed to the agent, which stores it once per content (named by its \
            BLAKE2b-256 digest) and writes the revision. Without --rev the document must not exist \
            yet (it is created with only the attachment); with --rev, that revision is replaced. \
            Files over the agent's size limit (attachment-size-limit, 4 GiB by default) are refused \
            before any byte is sent.
            """)
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var database: DatabaseOption
    @Argument(help: "The document.") var id: String
    @Argument(help: "The attachment's name.") var name: String
    @Option(help: "The file to attach.") var file: String
    @Option(help: "Its content type (default: from the file's extension, else application/octet-stream).") var type: String?
    @Option(help: "The revision to replace (needed when the document exists).") var rev: RevisionID?

    func run() throws {
        let input = open(file, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { throw CtlFailure(status: .error, message: "cannot open \(file): \(String(cString: strerror(errno)))") }
        defer { close(input) }
        var info = stat()
        guard fstat(input, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
            throw CtlFailure(status: .error, message: "\(file) is not a regular file")
        }
        let command = Admin.Attach(
            db: database.db, doc: id, name: name, length: Int64(info.st_size), contentType: type ?? Self.contentType(of: file), rev: rev)
        let client = try connection.connect()
        let response: Result<AdminAnswer<Admin.Attach>, AdminFailure>
        do {
            response = try client.upload(command) { buffer in read(input, buffer.baseAddress, buffer.count) }
        } catch {
            throw CtlFailure(status: .error, message: "\(error)", timedOut: error.isTimeout)
        }
        let answer = try connection.answer(response)
        let reply = answer.reply
        connection.json
            ? printJSON(.object(answer.members))
            : print("\(writeSummary(Admin.WriteReply(doc: reply.doc, rev: reply.rev))) (\(reply.name): \(reply.length) bytes, \(reply.digest))")
    }

    /// Common content types by file extension, as web servers map them.
    static let typesByExtension = [
        "txt": "text/plain", "json": "application/json", "html": "text/html", "css": "text/css", "js": "text/javascript",
        "csv": "text/csv", "xml": "application/xml", "pdf": "application/pdf", "png": "image/png", "jpg": "image/jpeg",
        "jpeg": "image/jpeg", "gif": "image/gif", "svg": "image/svg+xml", "webp": "image/webp", "zip": "application/zip",
        "gz": "application/gzip", "mp3": "audio/mpeg", "mp4": "video/mp4",
    ]

    static func contentType(of path: String) -> String {
        typesByExtension[(path as NSString).pathExtension.lowercased()] ?? "application/octet-stream"
    }
}

struct AttachmentCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attachment",
        abstract: "Write an attachment's bytes to stdout (or --output PATH).",
        discussion: """
            The bytes are checked against the attachment's digest as they arrive. With --output the \
            file appears only once whole and checked; content that does not match (damaged on the \
            agent's disk) fails with status 1 and leaves no file.
            """)
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var database: DatabaseOption
    @Argument(help: "The document.") var id: String
    @Argument(help: "The attachment's name.") var name: String
    @Option(help: "A revision other than the current one.") var rev: RevisionID?
    @Option(help: "Write the bytes to this file instead of stdout.") var output: String?

    func run() throws {
        let command = Admin.GetAttachment(db: database.db, doc: id, name: name, rev: rev)
        let partial = output.map { $0 + ".partial-\(getpid())" }
        let target = try partial.map { path in
            let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw CtlFailure(status: .error, message: "cannot create \(path): \(String(cString: strerror(errno)))") }
            return fd
        } ?? STDOUT_FILENO
        defer {
            if let partial {
                close(target)
                unlink(partial)  // gone already when renamed
            }
        }
        let hash = Blake2bStream(outputBytes: AttachmentDigest.byteCount)
        let client = try connection.connect()
        let response: Result<AdminAnswer<Admin.GetAttachment>, AdminFailure>
        do {
            response = try client.download(command) { part in
                hash.update(part)
                try part.withUnsafeBytes { raw in
                    var offset = 0
                    while offset < raw.count {
                        let written = write(target, raw.baseAddress! + offset, raw.count - offset)
                        if written < 0 && errno == EINTR { continue }
                        guard written > 0 else {
                            throw CtlFailure(status: .error, message: "writing \(output ?? "stdout") failed: \(String(cString: strerror(errno)))")
                        }
                        offset += written
                    }
                }
            }
        } catch let failure as CtlFailure {
            throw failure
        } catch let error as AdminSocketClient.ClientError {
            let detail = if case .closed = error { "the agent ended the transfer before the last byte (see its log)" } else { "\(error)" }
            throw CtlFailure(status: .error, message: "\(detail); \(output.map { "\($0) was not written" } ?? "stdout holds a partial attachment")", timedOut: error.isTimeout)
        }
        let answer = try connection.answer(response)
        guard AttachmentDigest(answer.reply.digest)?.bytes == hash.finish() else {
            throw CtlFailure(status: .error, message: "the bytes received do not match the attachment's digest \(answer.reply.digest); \(output.map { "\($0) was not written" } ?? "stdout holds damaged bytes")")
        }
        if let output, let partial {
            guard fsync(target) == 0, rename(partial, output) == 0 else {
                throw CtlFailure(status: .error, message: "cannot write \(output): \(String(cString: strerror(errno)))")
            }
            if connection.json { printJSON(.object(answer.members)) }
        }
    }
}

struct Detach: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Remove an attachment from a document: a new revision without it.")
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var database: DatabaseOption
    @Argument(help: "The document.") var id: String
    @Argument(help: "The attachment's name.") var name: String
    @Option(help: "The revision to replace.") var rev: RevisionID

    func run() throws {
        let answer = try connection.call(Admin.Detach(db: database.db, doc: id, name: name, rev: rev))
        connection.json ? printJSON(.object(answer.members)) : print(writeSummary(answer.reply))
    }
}

struct Compact: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Drop old revisions' bodies and remove attachment content no revision names.",
        discussion: """
            Bodies of non-leaf revisions are dropped (except the common ancestor of each open \
            conflict) and the database file rebuilt; then every attachment content that no kept \
            revision of any database names is removed, unless an upload or a download holds it at \
            that moment. Document commands wait while it runs.
            """)
    @OptionGroup var connection: ConnectionOptions
    @Option(help: "Compact only this database's bodies (attachment content is collected for all).") var db: String?

    func run() throws {
        let answer = try connection.call(Admin.Compact(db: db))
        if connection.json { return printJSON(.object(answer.members)) }
        let report = answer.reply
        let names = report.databases.isEmpty ? "-" : report.databases.joined(separator: ",")
        print("compacted \(names): \(report.bodiesDropped) bodies dropped; attachments: \(report.attachmentsRemoved) removed (\(report.attachmentBytesFreed) bytes freed), \(report.attachmentsKept) kept, \(report.attachmentsPinned) in use")
    }
}
