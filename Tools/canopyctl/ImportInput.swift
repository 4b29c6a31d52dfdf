import CanopyAgent
import CanopyCore
import CanopyStore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The import's input: a file (whose size is the progress total) or stdin.
final class ImportInput {
    let handle: FileHandle
    let size: Int?
    let seekable: Bool
    static let chunkBytes = 1 << 20
    /// Bytes read from stdin to look for `new_edits`, handed out again first: in memory up to
    /// `stdinLookAheadBytes`, in `spool` beyond.
    private var pushedBack: [UInt8]?
    /// An unlinked temporary file holding what was read from stdin to look for `new_edits`, when
    /// more than `stdinLookAheadBytes` came before it (a CouchDB dump printed by `jq` names it
    /// after the documents).
    private var spool: FileHandle?
    /// How much of stdin is held in memory while looking for `new_edits`; beyond it, a temporary file.
    static let stdinLookAheadBytes = 64 << 20

    init(path: String) throws {
        if path == "-" {
            handle = .standardInput
            size = nil
            seekable = false
            return
        }
        guard let opened = FileHandle(forReadingAtPath: path) else {
            throw CtlFailure(status: .error, message: "cannot read \(path)")
        }
        handle = opened
        var info = stat()
        let regular = fstat(opened.fileDescriptor, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG
        size = regular ? Int(info.st_size) : nil
        seekable = regular
    }

    /// The body's `new_edits`, read ahead until it is known: at once when the body names it
    /// before the documents (`canopyctl export` writes it first), else at the end of the body.
    /// A regular file is then read again from the start; stdin cannot be, so its bytes are held
    /// (and handed out again by `forEachChunk`): in memory up to `stdinLookAheadBytes`, then in
    /// a temporary file, so a body of any size whose documents come first imports. A body the
    /// splitter refuses throws its `BulkDocsSplitter.Problem`.
    func newEditsMember() throws -> Bool? {
        var splitter = BulkDocsSplitter(elementBytesMax: AgentLimits.adminLineBytesMax)
        var found: JSONValue?
        var sawDocument = false
        var held: [UInt8] = []
        while true {
            let chunk = [UInt8](handle.readData(ofLength: Self.chunkBytes))
            if !seekable { try hold(chunk, in: &held) }
            try splitter.feed(chunk, element: { _ in sawDocument = true }, member: { name, value in
                if name == "new_edits" { found = try? JSONValue.parse(value) }
            })
            if (found != nil && !sawDocument) || splitter.isComplete || chunk.isEmpty { break }
        }
        if seekable {
            try handle.seek(toOffset: 0)
        } else if let spool {
            try spool.seek(toOffset: 0)
        } else {
            pushedBack = held
        }
        return try Self.flag(found)
    }

    /// Keeps a chunk read ahead from stdin: in `held` while it stays within
    /// `stdinLookAheadBytes`, else in the spool file (made then, with what `held` had).
    private func hold(_ chunk: [UInt8], in held: inout [UInt8]) throws {
        if spool == nil && held.count + chunk.count <= Self.stdinLookAheadBytes {
            held += chunk
            return
        }
        do {
            if spool == nil {
                spool = try Self.temporaryFile()
                try spool!.write(contentsOf: held)
                held = []
            }
            try spool!.write(contentsOf: chunk)
        } catch {
            throw CtlFailure(
                status: .error,
                message: "cannot hold stdin in a temporary file while looking for \"new_edits\" after the documents (\(error)): set TMPDIR, or say --new-edits false (revisions as they are) or true (new revisions)")
        }
    }

    /// A new file in `$TMPDIR` (else /tmp), already unlinked: it goes when it is closed.
    private static func temporaryFile() throws -> FileHandle {
        let directory = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array((directory + "/canopyctl-import-XXXXXX").utf8CString)
        let descriptor = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard descriptor >= 0 else {
            throw CtlFailure(status: .error, message: "cannot make a temporary file in \(directory): \(String(cString: strerror(errno)))")
        }
        _ = template.withUnsafeBufferPointer { unlink($0.baseAddress!) }
        return FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
    }

    static func flag(_ value: JSONValue?) throws -> Bool? {
        switch value {
        case nil: return nil
        case .bool(let flag)?: return flag
        default: throw CtlFailure(status: .usage, message: "\"new_edits\" in the body must be true or false")
        }
    }

    /// Hands out the body in chunks: what was read ahead first (held or spooled), then the rest.
    func forEachChunk(_ body: ([UInt8]) throws -> Void) throws {
        if let first = pushedBack {
            pushedBack = nil
            try body(first)
        }
        if let held = spool {
            spool = nil
            while true {
                let data = held.readData(ofLength: Self.chunkBytes)
                if data.isEmpty { break }
                try body([UInt8](data))
            }
        }
        while true {
            let data = handle.readData(ofLength: Self.chunkBytes)
            if data.isEmpty { return }
            try body([UInt8](data))
        }
    }
}
