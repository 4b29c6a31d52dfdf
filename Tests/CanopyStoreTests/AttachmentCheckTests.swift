import CanopyCore
import Testing
@testable import CanopyStore

@Suite("finding a top-level _attachments member in a canonical body")
struct AttachmentCheckTests {
    @Test("found only at the top level, not nested, not inside a string, not under another name")
    func topLevelOnly() throws {
        let stub = AttachmentMetadata(
            contentType: "text/plain", length: 1, digest: AttachmentDigest(bytes: [UInt8](repeating: 3, count: 32)), revpos: 1)
        let cases: [(JSONValue, Bool)] = [
            (Attachments.body(.object(["a": .int(1)]), with: ["x": stub]), true),
            (Attachments.body(.object(["A": .int(1), "_a": .int(2), "z": .string("_")]), with: ["x": stub]), true),
            (.object(["nested": .object(["_attachments": .object([:])])]), false),
            (.object(["text": .string("\"_attachments\":{}")]), false),
            (.object(["_attachment": .int(1), "__attachments": .int(2), "x_attachments": .int(3)]), false),
            (.object([:]), false),
        ]
        for (body, expected) in cases {
            #expect(AttachmentCheck.names(CanonicalJSON.encode(body)) == expected, "\(body)")
        }
    }
}
