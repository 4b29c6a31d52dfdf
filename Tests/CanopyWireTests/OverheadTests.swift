import CanopyCore
import Testing
@testable import CanopyWire

/// `Protocol/design.md` §8: protocol bytes per revision beyond its body ≤ 64 for typical 10–20 byte doc ids.
@Suite("Protocol overhead")
struct OverheadTests {
    /// Bytes on the wire for `message`: its frames' headers, MACs and fragment flags included.
    private func wireBytes(_ message: Message) -> Int {
        MessageFragmenter.plaintexts(of: message.encoded()).reduce(0) {
            $0 + WireLimits.frameHeaderBytes + WireLimits.secretstreamOverheadBytes + $1.count
        }
    }

    /// Per-revision overhead of one batch of `count` documents with `docIDBytes`-byte ids and
    /// 1 KiB bodies; `update` makes each an edit whose parent the target has.
    private func overhead(count: Int, docIDBytes: Int, update: Bool) -> Double {
        var random = SplitMix64(seed: 9)
        func revision(_ generation: Int) -> RevisionID {
            RevisionID(generation: generation, digestHigh: random.next(), digestLow: random.next())
        }
        var entries: [ChangesEntry] = []
        var items: [ChangesReplyItem] = []
        var transfers: [RevisionTransfer] = []
        for index in 0..<count {
            let docID = String(String(index).padding(toLength: docIDBytes, withPad: "x", startingAt: 0).prefix(docIDBytes))
            let leaf = revision(update ? 2 : 1)
            entries.append(ChangesEntry(sequence: UInt64(50_000 + index), docID: docID, revisions: [LeafRevision(id: leaf, kind: .live)]))
            items.append(ChangesReplyItem(missing: [0], knownAncestors: update ? [revision(1)] : []))
            transfers.append(RevisionTransfer(ancestry: [], knownAncestorTail: update ? 1 : 0, body: [UInt8](repeating: 0x61, count: 1024)))
        }
        let messages: [Message] = [
            .changes(Changes(requestID: 70_000, subscriptionID: 1, caughtUp: false, entries: entries)),
            .changesReply(ChangesReply(requestID: 70_000, items: items)),
            .revisions(Revisions(requestID: 70_000, final: true, revisions: transfers)),
            .revisionsAck(RevisionsAck(requestID: 70_000, status: .ok)),
        ]
        let total = messages.reduce(0) { $0 + wireBytes($1) }
        return Double(total - count * 1024) / Double(count)
    }

    @Test("per-revision protocol overhead stays within the 64-byte budget", arguments: [10, 15, 20])
    func budget(docIDBytes: Int) {
        let fresh = overhead(count: 200, docIDBytes: docIDBytes, update: false)
        let update = overhead(count: 200, docIDBytes: docIDBytes, update: true)
        #expect(fresh <= Double(docIDBytes + 27), "new documents: \(fresh) bytes per revision")
        #expect(update <= Double(docIDBytes + 44), "updates: \(update) bytes per revision")
        #expect(fresh <= 64 && update <= 64)
    }
}
