// canopy-crashtest: the child process of the store's durability test (CrashTests.swift).
//
// Usage: canopy-crashtest <database path> <run tag> <batches> <documents per batch>
//
// Writes numbered batches to the store, alternating local put batches and foreign insert batches,
// and prints "committed N" (flushed) after each batch's commit has returned. The test kills this
// process with SIGKILL at arbitrary points and then checks that every batch it saw committed is
// fully present, and that no batch is partly present. Document ids are "<run>/<batch>/<index>".
import CanopyCore
import CanopyStore
import Foundation

let arguments = CommandLine.arguments
guard arguments.count == 5, let batches = Int(arguments[3]), let size = Int(arguments[4]), batches > 0, size > 0 else {
    FileHandle.standardError.write(Data("usage: canopy-crashtest <path> <run> <batches> <documents per batch>\n".utf8))
    exit(2)
}
let run = arguments[2]

do {
    let store = try DocumentStore(path: arguments[1])
    for batch in 0..<batches {
        let ids = (0..<size).map { "\(run)/\(batch)/\($0)" }
        let bodies = (0..<size).map { index in
            JSONValue.object(["run": .string(run), "batch": .int(Int64(batch)), "index": .int(Int64(index))])
        }
        if batch % 2 == 0 {
            _ = try store.putBatch(zip(ids, bodies).map { LocalWrite(documentID: $0, body: $1, replacing: nil) })
        } else {
            let revisions = try zip(ids, bodies).map { id, body in
                let leaf = RevisionHasher.revisionID(parent: nil, kind: .live, body: body)
                return ForeignRevision(documentID: id, path: try RevisionPath(leaf: leaf, kind: .live), body: .value(body))
            }
            _ = try store.bulkInsertForeign(revisions)
        }
        // An unbuffered write: the line reaches the pipe before the next batch starts.
        FileHandle.standardOutput.write(Data("committed \(batch)\n".utf8))
    }
} catch {
    FileHandle.standardError.write(Data("canopy-crashtest: \(error)\n".utf8))
    exit(1)
}
