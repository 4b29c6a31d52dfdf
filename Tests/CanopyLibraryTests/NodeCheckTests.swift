import Canopy
import Foundation
import Testing

/// Opening a node does not read its whole file; `Node.check` does, when the application asks, and
/// `checksDatabasesOnOpen` refuses a damaged file as `canopyd` does.
@Suite("Node: checking the files")
struct NodeCheckTests {
    /// A node directory of 200 documents whose database file then has bytes flipped inside a
    /// table page, as a failing disk leaves them.
    static func damagedNode(_ directory: TemporaryDirectory) async throws -> String {
        let path = directory.path("node")
        let node = try Node(directory: path)
        // Written from a synchronous closure: 200 writes without a suspension each.
        let fill: () throws -> Void = {
            for index in 0..<200 {
                _ = try node.database.save(json: .object(["text": .string(String(repeating: "x", count: 1000))]), id: "doc-\(index)")
            }
        }
        try fill()
        let sound = try await node.check()
        #expect(sound.sound && sound.documents == 200 && sound.problems.isEmpty, "\(sound)")
        await node.stop()
        let file = path + "/canopy.sqlite"
        var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: file)))
        #expect(bytes.count > 20 * 4096)
        for offset in (10 * 4096)..<(10 * 4096 + 64) { bytes[offset] ^= 0x5A }
        try Data(bytes).write(to: URL(fileURLWithPath: file))
        return path
    }

    @Test("a node opens without the whole-file check; check() then names the damage", .timeLimit(.minutes(5)))
    func checkFindsDamage() async throws {
        let directory = TemporaryDirectory()
        let path = try await Self.damagedNode(directory)
        let node = try Node(directory: path)
        let report = try await node.check(attachments: false)
        #expect(!report.sound && !report.problems.isEmpty, "\(report)")
        await node.stop()
    }

    @Test("with checksDatabasesOnOpen, a damaged file is refused, naming it", .timeLimit(.minutes(5)))
    func checkOnOpenRefuses() async throws {
        let directory = TemporaryDirectory()
        let path = try await Self.damagedNode(directory)
        var options = Node.Options()
        options.checksDatabasesOnOpen = true
        let error = #expect(throws: NodeError.self) { try Node(directory: path, options: options) }
        #expect(error?.description.contains("canopy.sqlite is damaged") == true, "\(String(describing: error))")
    }
}
