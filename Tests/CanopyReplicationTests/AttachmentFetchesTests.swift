import CanopyCore
import CanopyStore
import CanopyWire
import Foundation
import Testing
@testable import CanopyReplication

/// The target's bookkeeping of attachment fetches: how many parts it asks for, and how many it
/// holds in memory while they wait to be written off the session's serial context.
@Suite("Attachment fetches")
struct AttachmentFetchesTests {
    /// A download of 4 MiB of content that is not here (16 parts of 256 KiB).
    static func download() throws -> (AttachmentDownload, () -> Void) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("fetches-\(UUID().uuidString)").path
        let store = AttachmentStore(directory: directory)
        let digest = AttachmentDigest(bytes: [UInt8](repeating: 7, count: AttachmentDigest.byteCount))
        return (try store.beginDownload(digest, length: 4 << 20), { try? FileManager.default.removeItem(atPath: directory) })
    }

    @Test("requests stop at 6 in flight, and at 10 parts either in flight or waiting to be written")
    func partsHeldBoundRequests() throws {
        let (download, remove) = try Self.download()
        defer { remove() }
        var fetches = AttachmentFetches()
        fetches.started(download)
        var next: RequestID = 1
        func request() -> RequestID? {
            fetches.nextRequest(othersOutstanding: 0, id: { defer { next += 1 }; return next })?.0
        }
        var sent: [RequestID] = []
        while let id = request() { sent.append(id) }
        #expect(sent.count == AttachmentFetches.requestsMax)

        // Four parts arrive and wait for the disk: four more requests fit, then none.
        let item = try #require(fetches.active[download.digest])
        for id in sent.prefix(4) {
            let answer = fetches.answered(id)
            let answered = try #require(answer)
            fetches.queue([UInt8](repeating: 0, count: answered.count), for: item)
        }
        #expect(fetches.partsHeld == 4)
        var more = 0
        while request() != nil { more += 1 }
        #expect(more == 4)
        #expect(fetches.requests.count + fetches.partsHeld == AttachmentFetches.partsHeldMax)

        // Two more parts arrive: six wait, four are in flight, and nothing more is asked for.
        for id in sent.dropFirst(4) {
            let answer = fetches.answered(id)
            let answered = try #require(answer)
            fetches.queue([UInt8](repeating: 0, count: answered.count), for: item)
        }
        #expect(fetches.partsHeld == 6)
        #expect(request() == nil)

        // One part written: one more request fits.
        let toWrite = fetches.nextToAppend(item)
        let part = try #require(toWrite)
        #expect(fetches.nextToAppend(item) == nil, "one part of a content is written at a time")
        fetches.appendEnded(item, count: part.count)
        #expect(item.appended == Int64(part.count))
        #expect(fetches.partsHeld == 5)
        #expect(request() != nil)
        #expect(request() == nil)

        // Given up: what it held is released.
        fetches.finished(download.digest, available: false)
        #expect(fetches.partsHeld == 0)
        #expect(fetches.active.isEmpty)
    }

    @Test("content this session finished with is queued again for a revision set aside after its merge, and never twice while it is on its way")
    func finishedContentComesBack() throws {
        let (download, remove) = try Self.download()
        defer { remove() }
        let awaited = AwaitedAttachment(digest: download.digest, length: download.length)
        var fetches = AttachmentFetches()
        fetches.enqueue([awaited])
        #expect(fetches.nextToStart() == awaited)
        fetches.started(download)
        fetches.enqueue([awaited])
        #expect(fetches.nextToStart() == nil, "content being fetched is not queued again")
        fetches.finished(download.digest, available: true)
        fetches.completed.append(download.digest)
        fetches.enqueue([awaited])
        #expect(fetches.nextToStart() == nil, "content fetched and not merged yet merges the revisions then")
        fetches.completed = []
        // Merged; then a revision naming the same content was set aside: it waits for it too.
        fetches.enqueue([awaited])
        #expect(fetches.nextToStart() == awaited)
    }
}
