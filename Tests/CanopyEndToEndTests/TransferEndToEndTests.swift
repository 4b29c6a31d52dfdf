import CanopyAgent
import CanopyCore
import CanopyStore
import Foundation
import Testing

/// Moving documents in and out of a real agent with `canopyctl import`, `export` and bulk writes:
/// sizes up to the body limit, heavily edited documents, streams, conflicts.
@Suite("import, export and bulk writes with real agents", .serialized)
struct TransferEndToEndTests {
    /// `canopyctl export`'s documents, each in canonical JSON, sorted.
    static func exported(_ agent: AgentProcess) throws -> [String] {
        let result = try agent.ctl(["export"])
        guard result.status == 0, case .array(let docs)? = try JSONValue.parse(Data(result.stdout.utf8)).objectValue?["docs"] else {
            Issue.record("export failed (\(result.status)): \(result.stderr)")
            return []
        }
        return docs.map { String(decoding: CanonicalJSON.encode($0), as: UTF8.self) }.sorted()
    }

    static func write(_ text: String, in agent: AgentProcess, name: String) throws -> String {
        let path = agent.temporary.path + "/" + name
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test("heavily edited documents export whole, page by page, and import elsewhere as the same documents")
    func heavilyEditedDocumentsRoundTrip() throws {
        let a = try AgentProcess()
        let b = try AgentProcess()
        try a.start()
        try b.start()
        // A document with 201 leaves: a live winner and 200 deleted CouchDB branches that
        // --couchdb keeps as closed leaves, each with a 25 KB body (5 MB: more than an export page
        // holds, so the document is split across pages by leaf), and a small document after it.
        let filler = String(repeating: "x", count: 25_000)
        let root = String(repeating: "0", count: 32)
        var entries = [#"{"_id":"heavy","_rev":"2-\#(String(repeating: "f", count: 32))","_revisions":{"start":2,"ids":["\#(String(repeating: "f", count: 32))","\#(root)"]},"n":1}"#]
        for branch in 0..<200 {
            let digest = String(format: "%032x", branch + 1)
            entries.append(#"{"_id":"heavy","_rev":"2-\#(digest)","_deleted":true,"_revisions":{"start":2,"ids":["\#(digest)","\#(root)"]},"filler":"\#(filler)"}"#)
        }
        entries.append(#"{"_id":"light","_rev":"1-\#(root)","n":2}"#)
        let file = try Self.write(#"{"new_edits":false,"docs":["# + entries.joined(separator: ",") + "]}", in: a, name: "heavy.json")
        let imported = try a.ctl(["import", file, "--couchdb"])
        #expect(imported.status == 0, "\(imported.stderr)")
        let onA = try Self.exported(a)
        #expect(onA.count == 202)
        // export | import - : the stream carries the mode first.
        let pipe = try a.ctl(["export"])
        let piped = try b.ctl(["import", "-"], stdin: pipe.stdout)
        #expect(piped.status == 0, "\(piped.stderr)")
        #expect(try Self.exported(b) == onA)
    }

    @Test("a body of several MiB is written, read and exported; one over 16 MiB is refused by size on put and import")
    func sizeLimit() throws {
        let a = try AgentProcess()
        try a.start()
        let big = String(repeating: "y", count: 3 << 20)
        let put = try a.ctl(["put", "big", "--file", "-"], stdin: #"{"s":"\#(big)"}"#)
        #expect(put.status == 0, "\(put.stderr)")
        #expect(try a.value(of: "big", "s") == .string(big))
        #expect(try Self.exported(a).count == 1)
        let huge = String(repeating: "z", count: (16 << 20) + 10)
        let refused = try a.ctl(["put", "huge", "--file", "-"], stdin: #"{"s":"\#(huge)"}"#)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("over the limit of 16777216 bytes (16 MiB)"), "\(refused.stderr)")
        let file = try Self.write(#"{"docs":[{"_id":"huge","s":"\#(huge)"}]}"#, in: a, name: "huge.json")
        let imported = try a.ctl(["import", file])
        #expect(imported.status != 0)
        #expect(imported.stderr.contains("bytes"), "\(imported.stderr)")
        #expect(try a.documentCount() == 1)
    }

    @Test("a _bulk_docs body without new_edits false writes new revisions; a stale entry is a conflict and the rest are written")
    func bulkWrites() throws {
        let a = try AgentProcess()
        try a.start()
        let first = try a.put("edited", ["v": .int(1)])
        let body = #"""
            {"docs":[{"_id":"new-1","n":1},{"_id":"new-2","n":2},{"_id":"edited","_rev":"\#(first)","v":2},
            {"_id":"edited","_rev":"\#(first)","v":3},{"_id":"new-1","n":9},
            {"_id":"missing","_rev":"1-\#(String(repeating: "a", count: 32))","v":1},
            {"_id":"missing","_rev":"1-\#(String(repeating: "a", count: 32))","_deleted":true},{"_id":"new-3","n":3}]}
            """#
        let file = try Self.write(body, in: a, name: "bulk.json")
        let result = try a.ctl(["import", file])
        #expect(result.status == 3, "\(result.stdout) \(result.stderr)")
        #expect(result.stdout.contains("wrote 4 documents, 4 conflicts"), "\(result.stdout)")
        #expect(result.stderr.contains("conflict: edited"), "\(result.stderr)")
        // A revision of a document that does not exist is a conflict of its entry, as in CouchDB,
        // not a refusal of the batch: the entries after it are written.
        #expect(result.stderr.contains("conflict: missing: 1-\(String(repeating: "a", count: 32)) is not the current revision (the document does not exist)"), "\(result.stderr)")
        #expect(try a.value(of: "new-3", "n") == .int(3))
        #expect(try a.value(of: "missing", "v") == nil)
        #expect(try a.value(of: "new-1", "n") == .int(1))
        #expect(try a.value(of: "edited", "v") == .int(2))
        // The same body over the socket, entry by entry.
        let response = try a.client().request("bulk_docs", ["docs": .array([
            .object(["_id": .string("new-4"), "n": .int(4)]), .object(["_id": .string("new-2"), "n": .int(4)]),
        ])])
        guard case .array(let rows)? = response["results"] else {
            Issue.record("no results: \(response)")
            return
        }
        #expect(rows.count == 2)
        #expect(rows[0].objectValue?["rev"] != nil)
        #expect(rows[1].objectValue?["error"] == .string("conflict"))
        #expect(response["written"] == .int(1) && response["conflicts"] == .int(1))
    }

    @Test("import from stdin reads the mode wherever the body says it; --new-edits overrides it")
    func stdinMode() throws {
        let a = try AgentProcess()
        try a.start()
        let written = try a.ctl(["import", "-"], stdin: #"{"docs":[{"_id":"s","n":1}]}"#)
        #expect(written.status == 0, "\(written.stderr)")
        #expect(written.stdout.contains("wrote 1 document, 0 conflicts"), "\(written.stdout)")
        guard case .string(let rev)? = try a.client().request("get", ["doc": .string("s")])["doc"]?.objectValue?["_rev"] else {
            Issue.record("s was not written")
            return
        }
        let digest = rev.split(separator: "-")[1]
        let asIs = #"{"docs":[{"_id":"t","_rev":"\#(rev)","_revisions":{"start":1,"ids":["\#(digest)"]},"n":1}],"new_edits":false}"#
        let imported = try a.ctl(["import", "-"], stdin: asIs)
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(imported.stdout.contains("imported 1 document, 1 new revision\n"), "\(imported.stdout)")
        let forced = try a.ctl(["import", "-", "--new-edits", "true"], stdin: #"{"docs":[{"_id":"u","n":2}],"new_edits":false}"#)
        #expect(forced.status == 0, "\(forced.stderr)")
        #expect(try a.value(of: "u", "n") == .int(2))
    }

    /// A `_bulk_docs` body of `count` revisions as `python3 -m json.tool` and `jq -S` print a
    /// CouchDB dump: four-space indents, one member per line, `"new_edits": false` after the
    /// documents. Each document carries `filler` bytes of text.
    static func prettyPrintedDump(count: Int, filler: Int = 0) -> String {
        let text = String(repeating: "w", count: filler)
        let docs = (0..<count).map { index in
            """
                    {
                        "_id": "p\(index)",
                        "_rev": "1-\(String(format: "%032x", index + 1))",
                        "n": \(index),
                        "text": "\(text) line\\nbreak",
                        "tags": [
                            "a",
                            "b"
                        ]
                    }
            """
        }
        return "{\n    \"docs\": [\n" + docs.joined(separator: ",\n") + "\n    ],\n    \"new_edits\": false\n}\n"
    }

    @Test("a pretty-printed body whose new_edits follows the documents imports from a file and from stdin, as on one line")
    func prettyPrintedBodies() throws {
        let a = try AgentProcess()
        try a.start()
        let body = Self.prettyPrintedDump(count: 3)
        let file = try Self.write(body, in: a, name: "pretty.json")
        let fromFile = try a.ctl(["import", file])
        #expect(fromFile.status == 0, "\(fromFile.stderr)")
        #expect(fromFile.stdout == "imported 3 documents, 3 new revisions\n", "\(fromFile.stdout)")
        #expect(try a.value(of: "p2", "tags") == .array([.string("a"), .string("b")]))
        #expect(try a.value(of: "p1", "text") == .string(" line\nbreak"))
        #expect(try a.ctl(["db", "create", "piped"]).status == 0)
        let fromStdin = try a.ctl(["import", "-", "--db", "piped"], stdin: body)
        #expect(fromStdin.status == 0, "\(fromStdin.stderr)")
        #expect(fromStdin.stdout == "imported 3 documents, 3 new revisions\n", "\(fromStdin.stdout)")
        let piped = try a.client().request("get", ["db": .string("piped"), "doc": .string("p0")])
        #expect(piped["doc"]?.objectValue?["_rev"] == .string("1-\(String(format: "%032x", 1))"), "\(piped)")
        // A raw line break inside a string is not JSON: refused, naming where, never sent.
        let broken = try a.ctl(["import", "-"], stdin: "{\"docs\":[{\"_id\":\"x\",\"_rev\":\"1-aa\",\"s\":\"a\nb\"}],\"new_edits\":false}")
        #expect(broken.status == 2)
        #expect(broken.stderr.contains("at byte 40: a control character (0xa) inside a string"), "\(broken.stderr)")
    }

    @Test("thousands of pretty-printed documents import from a file, and past the 64 MiB held in memory from stdin, new_edits last")
    func largePrettyPrintedBodies() throws {
        let a = try AgentProcess()
        try a.start()
        let file = try Self.write(Self.prettyPrintedDump(count: 5000), in: a, name: "many.json")
        let fromFile = try a.ctl(["import", file])
        #expect(fromFile.status == 0, "\(fromFile.stderr)")
        #expect(fromFile.stdout == "imported 5000 documents, 5000 new revisions\n", "\(fromFile.stdout)")
        #expect(try a.documentCount() == 5000)
        // About 72 MiB: more than stdin's look-ahead keeps in memory, so it goes to a temporary file.
        let large = Self.prettyPrintedDump(count: 3600, filler: 20_000)
        #expect(large.utf8.count > 64 << 20)
        #expect(try a.ctl(["db", "create", "large"]).status == 0)
        let fromStdin = try a.ctl(["import", "-", "--db", "large"], stdin: large)
        #expect(fromStdin.status == 0, "\(fromStdin.stderr)")
        #expect(fromStdin.stdout == "imported 3600 documents, 3600 new revisions\n", "\(fromStdin.stdout)")
        let last = try a.client().request("get", ["db": .string("large"), "doc": .string("p3599")])
        #expect(last["doc"]?.objectValue?["n"] == .int(3599), "\(last)")
    }
}
