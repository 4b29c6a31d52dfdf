import CanopyCore
import Testing
@testable import CanopyStore

@Suite("Canonical JSON reader: one member")
struct CanonicalJSONMemberTests {
    @Test("a top-level member is read as the whole parse reads it, stepping over the members before it")
    func member() throws {
        let body: JSONValue = .object([
            "a": .array([.object(["type": .string("inner")]), .string("x\"}]"), .double(1.5e300), .null, .bool(true)]),
            "b\\\"": .object(["nested": .object(["deep": .array([])])]),
            "p": .string("ends in a backslash\\"),
            "q": .string("\\\"\\\\\""),
            "text": .string("line\nbreak \u{1}"),
            "type": .string("note"),
            "z": .int(-7),
        ])
        let bytes = CanonicalJSON.encode(body)
        for (name, value) in body.objectValue! {
            #expect(CanonicalJSONReader.member(name, of: bytes) == .some(value), "\(name)")
        }
        #expect(CanonicalJSONReader.member("missing", of: bytes) == .some(nil))
        #expect(CanonicalJSONReader.member("type", of: CanonicalJSON.encode(.emptyObject)) == .some(nil))
        // Not the canonical form the reader knows: the caller parses the body whole.
        #expect(CanonicalJSONReader.member("type", of: Array(#"{ "type": "note" }"#.utf8)) == nil)
        #expect(CanonicalJSONReader.member("type", of: Array(#"[1]"#.utf8)) == nil)
        #expect(CanonicalJSONReader.member("type", of: Array(#"{"a":"unterminated"#.utf8)) == nil)
    }
}
