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

    @Test("revision ids hash exactly the bytes the definition names, for every generation width and kind")
    func hashMatchesDefinition() {
        var random = SplitMix64(seed: 41)
        let generations = [1, 9, 10, 99, 100, 12_345, RevisionID.generationMax - 1]
        for step in 0..<600 {
            let body = (0..<Int(random.next() % 300)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            let parent: RevisionID? = step % 7 == 0 ? nil : RevisionID(
                generation: generations[step % generations.count], digestHigh: random.next(), digestLow: random.next())
            let kind = [RevisionKind.live, .deleted, .closed, .resolvedLive, .resolvedDeleted][step % 5]
            // The definition (Protocol, "Revision ids"), spelled out as one input array.
            let parentText = Array((parent?.description ?? "").utf8)
            let input = [UInt8(parentText.count)] + parentText + [kind.rawValue] + body
            let expected = RevisionID(generation: (parent?.generation ?? 0) + 1, digest: Blake2b.hash(input, outputBytes: 16))
            #expect(RevisionHasher.revisionID(parent: parent, kind: kind, canonicalBody: body) == expected)
        }
    }
}
