import Testing
@testable import CanopyCore

@Suite("Revision ids")
struct RevisionIDTests {
    @Test("a revision id prints as N-H and parses back to itself")
    func roundTrip() throws {
        let text = "12-0123456789abcdef0123456789abcdef"
        let id = try #require(RevisionID(text))
        #expect(id.generation == 12)
        #expect(id.description == text)
        #expect(id.digest.count == 16)
        #expect(RevisionID(generation: 12, digest: id.digest) == id)
    }

    @Test("malformed revision ids are rejected", arguments: [
        "", "1", "1-", "-0123456789abcdef0123456789abcdef", "0-0123456789abcdef0123456789abcdef",
        "01-0123456789abcdef0123456789abcdef", "1-0123456789ABCDEF0123456789abcdef",
        "1-0123456789abcdef0123456789abcde", "1-0123456789abcdef0123456789abcdef0",
        "x-0123456789abcdef0123456789abcdef", "4294967296-0123456789abcdef0123456789abcdef",
        "1-0123456789abcdeg0123456789abcdef",
    ])
    func rejectsMalformed(text: String) {
        #expect(RevisionID(text) == nil)
    }

    @Test("ordering compares generations numerically, then the hex digest byte by byte")
    func ordering() throws {
        let nine = try #require(RevisionID("9-ffffffffffffffffffffffffffffffff"))
        let ten = try #require(RevisionID("10-00000000000000000000000000000000"))
        #expect(nine < ten)
        let low = try #require(RevisionID("3-0fffffffffffffffffffffffffffffff"))
        let high = try #require(RevisionID("3-f0000000000000000000000000000000"))
        #expect(low < high)
        let a = try #require(RevisionID("3-00000000000000000000000000000001"))
        let b = try #require(RevisionID("3-00000000000000010000000000000000"))
        #expect(a < b)
        #expect(a.description < b.description)
    }

    @Test("the same edit on two nodes gets the same id; kind and parent change it")
    func contentAddressed() throws {
        let body = try JSONValue.parse(#"{"b":1,"a":[true,null]}"#)
        let same = try JSONValue.parse(#"{ "a" : [ true , null ] , "b" : 1.0 }"#)
        let first = RevisionHasher.revisionID(parent: nil, kind: .live, body: body)
        #expect(first.generation == 1)
        #expect(first == RevisionHasher.revisionID(parent: nil, kind: .live, body: same))
        #expect(first != RevisionHasher.revisionID(parent: nil, kind: .deleted, body: body))
        let child = RevisionHasher.revisionID(parent: first, kind: .live, body: body)
        #expect(child.generation == 2)
        #expect(child != first)
        let closed = RevisionHasher.revisionID(parent: first, kind: .closed, body: .emptyObject)
        let deleted = RevisionHasher.revisionID(parent: first, kind: .deleted, body: .emptyObject)
        #expect(closed != deleted)
    }
}
