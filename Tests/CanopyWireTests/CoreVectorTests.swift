import CanopyCore
import Foundation
import Testing

/// Checks `Protocol/vectors/canonical-json.json` and `revision-ids.json` against CanopyCore.
@Suite("Canonical JSON and revision id vectors", .serialized)
struct CoreVectorTests {
    /// Inputs and their canonical forms. The first group repeats `CanonicalJSONTests`; the rest
    /// add nesting, escapes, number edges and Unicode key order.
    static let canonicalCases: [(input: String, canonical: String)] = [
        (#"{ "b": 1, "a": 2, "A": 3, "é": 4, "z": 5 }"#, #"{"A":3,"a":2,"b":1,"z":5,"é":4}"#),
        (#"{"\u20ac":1,"\ud83d\ude00":2,"\u00ff":3}"#, "{\"ÿ\":3,\"€\":1,\"😀\":2}"),
        (#"["a\"b\\c\/d\u0001\b\t\n\f\r\u001f\u007f\u2028"]"#, "[\"a\\\"b\\\\c/d\\u0001\\b\\t\\n\\f\\r\\u001f\u{7f}\u{2028}\"]"),
        ("0", "0"), ("-0", "0"), ("-0.0", "0"), ("1.0", "1"), ("1e2", "100"), ("1.5", "1.5"),
        ("-12.25", "-12.25"), ("0.000001", "0.000001"), ("1e-7", "1e-7"), ("123e-20", "1.23e-18"),
        ("1e21", "1e+21"), ("1e20", "100000000000000000000"), ("9007199254740993", "9007199254740993"),
        ("9223372036854775807", "9223372036854775807"), ("-9223372036854775808", "-9223372036854775808"),
        ("0.1", "0.1"), ("5e-324", "5e-324"), ("1.7976931348623157e308", "1.7976931348623157e+308"),
        ("333333333.33333329", "333333333.3333333"), ("4.5", "4.5"), ("2e-3", "0.002"),
        (" { } ", "{}"), ("[ ]", "[]"), (#""""#, #""""#), ("null", "null"), ("true", "true"), ("false", "false"),
        (#"{"z":{"b":[3,{"d":1,"c":2}],"a":null},"":0}"#, #"{"":0,"z":{"a":null,"b":[3,{"c":2,"d":1}]}}"#),
        (#"{"aa":1,"a":2,"ab":3,"b":4}"#, #"{"a":2,"aa":1,"ab":3,"b":4}"#),
        (#"{"\ufb01":1,"\uffff":2,"\ud800\udc00":3}"#, "{\"ﬁ\":1,\"\u{ffff}\":2,\"\u{10000}\":3}"),
        (#""\u0000\u001F\u0020\"""#, #""\u0000\u001f \"""#),
        (#""\u00e9 and é""#, #""é and é""#),
        ("[1E400000000000000000000, 0]", "error"),
        ("-1.5e-300", "-1.5e-300"), ("123456789012345678901234567890", "1.2345678901234568e+29"),
        ("0.30000000000000004", "0.30000000000000004"), ("100e-2", "1"), ("-9223372036854775809", "-9223372036854776000"),
        ("[1,[2,[3,[4]]]]", "[1,[2,[3,[4]]]]"),
    ]

    @Test("every canonical JSON vector gives its canonical form, which is a fixed point")
    func canonicalJSON() throws {
        if VectorFiles.regenerating {
            let cases = Self.canonicalCases.filter { $0.canonical != "error" }.map { input, _ -> [String: String] in
                let output = (try? JSONValue.parse(input)).map { String(decoding: CanonicalJSON.encode($0), as: UTF8.self) }
                return ["input": input, "canonical": output ?? "error"]
            }
            try VectorFiles.writeJSON(["cases": cases], to: "Protocol/vectors/canonical-json.json")
        }
        let file = try VectorFiles.readJSON("Protocol/vectors/canonical-json.json")
        let cases = try #require(file["cases"] as? [[String: String]])
        #expect(cases.count >= 40)
        let expected = Dictionary(Self.canonicalCases.map { ($0.input, $0.canonical) }, uniquingKeysWith: { first, _ in first })
        for vector in cases {
            let input = try #require(vector["input"]), canonical = try #require(vector["canonical"])
            #expect(expected[input] == canonical, "file and fixture disagree on \(input)")
            let output = String(decoding: CanonicalJSON.encode(try JSONValue.parse(input)), as: UTF8.self)
            #expect(output == canonical, "\(input)")
            #expect(String(decoding: CanonicalJSON.encode(try JSONValue.parse(output)), as: UTF8.self) == output)
        }
    }

    @Test("a number too large for a double is an error, not a canonical form")
    func hugeNumber() {
        #expect(throws: JSONError.self) { try JSONValue.parse("[1E400000000000000000000, 0]") }
    }

    /// (name, parent index into this list or nil, kind, canonical body).
    static let revisionCases: [(name: String, parent: Int?, kind: RevisionKind, body: String)] = [
        ("new-empty", nil, .live, "{}"),
        ("new-todo", nil, .live, #"{"done":false,"title":"milk"}"#),
        ("edit-todo", 1, .live, #"{"done":true,"title":"milk"}"#),
        ("delete-todo", 2, .deleted, "{}"),
        ("close-branch", 2, .closed, "{}"),
        ("resolution-merge", 2, .resolvedLive, #"{"done":true,"title":"milk and eggs"}"#),
        ("resolution-delete", 2, .resolvedDeleted, "{}"),
        ("unicode-body", nil, .live, "{\"ключ\":\"значение 😀\"}"),
        ("same-edit-elsewhere", 1, .live, #"{"done":true,"title":"milk"}"#),
        ("attachment-added", 2, .live, Self.attachmentBody),
    ]

    /// "edit-todo" with `note.txt` attached: the content `hello\n`, 6 bytes, added at generation 3.
    static let attachmentBody = #"{"_attachments":{"note.txt":{"content_type":"text/plain","digest":"#
        + #""blake2b-93becc6e9882211c3ec3708c95bcd69baab7bb59c7f4bc84ce637b88a534b783","length":6,"revpos":3,"stub":true}},"#
        + #""done":true,"title":"milk"}"#

    @Test("the attachment vector's stub names the BLAKE2b-256 of its content and parses as AttachmentMetadata")
    func attachmentVector() throws {
        let body = try JSONValue.parse(Self.attachmentBody)
        #expect(CanonicalJSON.encode(body) == Array(Self.attachmentBody.utf8), "the vector body is canonical")
        let metadata = try #require(try Attachments.metadata(in: body)["note.txt"])
        let stream = Blake2bStream()
        stream.update(Array("hello\n".utf8))
        #expect(metadata.digest == AttachmentDigest(bytes: stream.finish()))
        #expect(metadata.length == 6 && metadata.revpos == 3 && metadata.contentType == "text/plain")
        #expect(Attachments.body(.object(["done": .bool(true), "title": .string("milk")]), with: ["note.txt": metadata]) == body)
    }

    @Test("every revision id vector hashes to its id with RevisionHasher")
    func revisionIDs() throws {
        if VectorFiles.regenerating {
            var ids: [RevisionID] = []
            var rows: [[String: Any]] = []
            for (name, parent, kind, body) in Self.revisionCases {
                let parentID = parent.map { ids[$0] }
                let id = RevisionHasher.revisionID(parent: parentID, kind: kind, canonicalBody: Array(body.utf8))
                ids.append(id)
                rows.append(["name": name, "parent": parentID.map { $0.description } ?? NSNull(), "kind": Int(kind.rawValue),
                             "body": body, "id": id.description])
            }
            try VectorFiles.writeJSON(["cases": rows], to: "Protocol/vectors/revision-ids.json")
        }
        let file = try VectorFiles.readJSON("Protocol/vectors/revision-ids.json")
        let cases = try #require(file["cases"] as? [[String: Any]])
        #expect(cases.count == Self.revisionCases.count)
        var byName: [String: String] = [:]
        for vector in cases {
            let parent = (vector["parent"] as? String).flatMap { RevisionID($0) }
            let kindNumber = try #require(vector["kind"] as? Int)
            let kind = try #require(RevisionKind(rawValue: UInt8(kindNumber)))
            let body = Array(try #require(vector["body"] as? String).utf8)
            let id = RevisionHasher.revisionID(parent: parent, kind: kind, canonicalBody: body)
            #expect(id.description == vector["id"] as? String)
            byName[try #require(vector["name"] as? String)] = id.description
        }
        // The same edit made on two nodes has the same id; a closing tombstone never equals a deletion.
        #expect(byName["edit-todo"] == byName["same-edit-elsewhere"])
        #expect(byName["delete-todo"] != byName["close-branch"])
    }
}
