import Canopy
import Foundation
import Testing

@Suite("Nodes replicating attachments", .serialized)
struct NodeAttachmentReplicationTests {
    @Test("a document with a 2 MiB attachment reaches the other node with its content, readable as a stream, once the replicator is idle")
    func attachmentReplicates() async throws {
        let directory = TemporaryDirectory()
        let a = try Node(directory: directory.path("a"))
        let b = try Node(directory: directory.path("b"))
        let (file, bytes) = try contentFile(directory, "scan.pdf", count: 2 << 20 | 777, seed: 9)
        let first = try await a.database.save(json: .object(["title": .string("scan")]), id: "doc")
        let revision = try await a.database.attach("scan.pdf", to: "doc", contentsOf: file, contentType: "application/pdf", replacing: first)
        a.replicator(ReplicatorConfiguration(peer: b.nodeID)).start()
        let replicator = b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: a.listenAddress))
        let status = replicator.status
        replicator.start()
        for await state in status where state == .idle { break }
        #expect(try await b.database.document(id: "doc")?.revision == revision)
        let metadata = try #require(try await b.database.attachments(of: "doc")?["scan.pdf"])
        #expect(metadata.length == Int64(bytes.count) && metadata.contentType == "application/pdf")
        #expect(try await collect(b.database.attachmentContents("scan.pdf", of: "doc")) == bytes)
        replicator.stop()
        await b.stop()
        await a.stop()
    }
}
