import Canopy
import Foundation
import Testing

/// A node whose application set its databases' conflict policy in the process, then reloads
/// its config file (`Node.reload()`, as `canopyctl reload` and SIGHUP do).
@Suite("Node: a conflict policy set in the process and reload")
struct NodeReloadTests {
    @Test("a conflict policy set in the process survives reload: manual keeps the conflicts made before and after it, and a custom resolver set later settles them", .timeLimit(.minutes(2)))
    func inProcessPolicySurvivesReload() async throws {
        let directory = TemporaryDirectory()
        let node = try Node(directory: directory.path("node"))   // its config file says `conflicts = automatic`
        let client = try NodeClient(directory: directory.path("node"))
        node.database.conflictResolution = .manual
        try makeConflict(node.database, "before", base: .object(["v": .int(0)]), local: .object(["v": .int(1)]), remote: .object(["v": .int(2)]))
        try await node.reload()
        // A command on the admin socket is served after the store work the reload started (its
        // scan of the kept conflicts), so its answer is the state after the reload.
        #expect(try await client.conflictedDocumentIDs() == ["before"], "the reload's scan kept it")
        try makeConflict(node.database, "after", base: .object(["v": .int(0)]), local: .object(["v": .int(1)]), remote: .object(["v": .int(2)]))
        #expect(try await node.database.conflictedDocumentIDs() == ["after", "before"], "a conflict after the reload is kept too")

        let merged = JSONValue.object(["v": .string("merged by the app")])
        node.database.conflictResolution = .custom(ClosureResolver { _ in .merged(merged) })
        try await node.reload()
        #expect(try await client.conflictedDocumentIDs().isEmpty, "the reload's scan settled both with the app's resolver")
        try makeConflict(node.database, "later", base: .object(["v": .int(0)]), local: .object(["v": .int(1)]), remote: .object(["v": .int(2)]))
        for id in ["before", "after", "later"] {
            #expect(try await node.database.document(id: id)?.body == merged, "\(id)")
        }
        await node.stop()
    }
}
