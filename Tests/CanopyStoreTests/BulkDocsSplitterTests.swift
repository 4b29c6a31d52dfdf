import CanopyCore
import Testing
@testable import CanopyStore

@Suite("Splitting a _bulk_docs body as it streams in")
struct BulkDocsSplitterTests {
    /// The elements and members `body` splits into when fed in chunks of the given sizes
    /// (cycled), or the problem it reports.
    private func split(_ body: String, chunks: [Int] = [Int.max]) throws -> (docs: [String], members: [String: String]) {
        var splitter = BulkDocsSplitter(elementBytesMax: 1 << 20)
        var docs: [String] = []
        var members: [String: String] = [:]
        let bytes = Array(body.utf8)
        var start = 0
        var index = 0
        while start < bytes.count {
            let size = min(chunks[index % chunks.count], bytes.count - start)
            try splitter.feed(Array(bytes[start..<start + size]), element: { docs.append(String(decoding: $0, as: UTF8.self)) },
                              member: { members[$0] = String(decoding: $1, as: UTF8.self) })
            start += size
            index += 1
        }
        try splitter.finish()
        return (docs, members)
    }

    static let body = #"""
         {"new_edits" : false, "docs": [ {"_id":"a","s":"}]\"{[","n":[1,{"x":"]"}]} ,
        {"_id":"b","nested":{"deep":[[],{}]}},{"_id":"c"} ], "other": {"k": [1, "]"]}, "last": "x\"}"}
        """#

    @Test("elements and members come out the same whole, byte by byte and in random chunks")
    func chunkings() throws {
        let whole = try split(Self.body)
        #expect(whole.docs == [#"{"_id":"a","s":"}]\"{[","n":[1,{"x":"]"}]}"#, #"{"_id":"b","nested":{"deep":[[],{}]}}"#, #"{"_id":"c"}"#])
        #expect(whole.members == ["new_edits": "false", "other": #"{"k": [1, "]"]}"#, "last": #""x\"}""#])
        for chunks in [[1], [2], [3, 1, 7], [13, 5], [64]] {
            let chunked = try split(Self.body, chunks: chunks)
            #expect(chunked.docs == whole.docs, "chunks \(chunks)")
            #expect(chunked.members == whole.members, "chunks \(chunks)")
        }
        var random = SplitMix64(seed: 7)
        for _ in 0..<50 {
            let chunks = (0..<8).map { _ in Int(random.next() % 40) + 1 }
            #expect(try split(Self.body, chunks: chunks).docs == whole.docs)
        }
    }

    @Test("every element parses back to the document it was")
    func elementsParse() throws {
        for doc in try split(Self.body).docs {
            #expect(throws: Never.self) { try JSONValue.parse(doc) }
        }
    }

    @Test("a pretty-printed body, new_edits after the documents, gives the elements it gives on one line, none with a line break")
    func prettyPrinted() throws {
        let pretty = """
            {
                "docs": [
                    {
                        "_id": "a",
                        "s": " spaced\\n \\" text ",
                        "n": [
                            1,
                            {\t"x" : "]" }
                        ]
                    },
                    {\r\n  "_id": "b"\r\n}
                ],
                "new_edits": false
            }

            """
        let oneLine = #"{"docs":[{"_id":"a","s":" spaced\n \" text ","n":[1,{"x":"]"}]},{"_id":"b"}],"new_edits":false}"#
        let flat = try split(oneLine)
        #expect(flat.docs == [#"{"_id":"a","s":" spaced\n \" text ","n":[1,{"x":"]"}]}"#, #"{"_id":"b"}"#])
        for chunks in [[Int.max], [1], [3, 1, 7], [13, 5]] {
            let chunked = try split(pretty, chunks: chunks)
            #expect(chunked.docs == flat.docs, "chunks \(chunks)")
            #expect(chunked.members == ["new_edits": "false"], "chunks \(chunks)")
        }
    }

    @Test("a raw line break or other control character inside a string is refused with its offset")
    func controlCharacterInString() {
        #expect(throws: BulkDocsSplitter.Problem(offset: 16, detail: "a control character (0xa) inside a string; JSON writes it escaped, as \\n for a line break")) {
            try split("{\"docs\":[{\"s\":\"a\nb\"}]}")
        }
    }

    @Test("bodies that are not _bulk_docs bodies are refused with the offset", arguments: [
        "", "[]", #"{"docs": {}}"#, #"{"docs": [1]}"#, #"{"docs": [{"a":1},]}"#, #"{"docs": [{"a":1}"#,
        #"{"docs": [{"a":1}]} x"#, #"{"docs": [], "docs": []}"#, #"{"x": 1}"#, #"{"docs": [{"a":1}}]}"#,
    ])
    func refused(body: String) {
        #expect(throws: BulkDocsSplitter.Problem.self) { try split(body) }
    }

    @Test("an element larger than the limit is refused before it is held")
    func elementLimit() {
        var splitter = BulkDocsSplitter(elementBytesMax: 16)
        #expect(throws: BulkDocsSplitter.Problem.self) {
            try splitter.feed(Array(#"{"docs":[{"a":"0123456789abcdef"}]}"#.utf8), element: { _ in })
        }
    }
}
