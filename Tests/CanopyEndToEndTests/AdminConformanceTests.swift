import CanopyAdmin
import CanopyAgent
import CanopyCore
import Foundation
import Testing

/// `Protocol/admin-v1.md` against the code and against running agents. The spec's tables are
/// parsed at run time (`AdminSpec`), so a command, argument, result member, error code or event
/// type added to the spec fails here until a scenario exercises it.
@Suite("admin-v1.md: every listed item exercised against real agents", .serialized)
struct AdminConformanceTests {
    /// Items of the spec no scenario can reach with a real `canopyd`, each with the reason.
    /// Keys are the items as the coverage report names them.
    static let notExercisable: [String: String] = [
        // `sync` answers `unavailable` only when its replication controller reports that code;
        // the engine canopyd runs (EngineReplication) never does, and a sync to an unknown or
        // unreachable peer is `not_found` or a wait. Only an embedder's own controller can send it.
        "error unavailable": "no code path in canopyd produces it",
    ]

    @Test("every command, argument, result member, error code and event type the spec lists is exercised, and the agents use no others")
    func everyListedItemIsExercised() throws {
        let spec = try AdminSpec.load()
        let coverage = AdminCoverage()
        try AdminConformanceScenarios(coverage: coverage).run()
        let (missing, unlisted) = coverage.compare(with: spec)
        let notAllowed = missing.filter { Self.notExercisable[$0] == nil }
        #expect(notAllowed.isEmpty, "listed in \(AdminSpec.path) but not exercised:\n  \(notAllowed.joined(separator: "\n  "))")
        #expect(unlisted.isEmpty, "seen from the agents or sent by the scenarios but not listed in \(AdminSpec.path):\n  \(unlisted.joined(separator: "\n  "))")
        // An allow-list entry must still be needed: once something exercises it, drop the entry.
        let stale = Self.notExercisable.keys.filter { !missing.contains($0) }.sorted()
        #expect(stale.isEmpty, "exercised after all; remove from notExercisable: \(stale)")
    }

    @Test("the spec's command table lists exactly the commands the agent serves")
    func commandsMatchTheCode() throws {
        #expect(try AdminSpec.load().commands.map(\.name).sorted() == Agent.commandNames.sorted())
    }

    @Test("the spec's error-code table lists exactly the codes the agent defines")
    func errorCodesMatchTheCode() throws {
        #expect(try AdminSpec.load().errorCodes.sorted() == AdminErrorCode.allCases.map(\.rawValue).sorted())
    }

    @Test("the spec's line limit, ring size and client limit are the code's")
    func limitsMatchTheCode() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent(AdminSpec.path), encoding: .utf8)
        #expect(text.contains("`adminLineBytesMax` = \(AgentLimits.adminLineBytesMax >> 20) MiB (\(AgentLimits.adminLineBytesMax) bytes"))
        #expect(text.contains("`eventRingCapacity` (\(AgentLimits.eventRingCapacity))"))
        #expect(text.contains("`adminConnectionsMax` (\(AgentLimits.adminConnectionsMax))"))
    }

    @Test("the table reader finds members in rows, skips prose and commentary, and follows \"as `cmd`\"")
    func tableReader() throws {
        let text = """
            ## 4. Error codes

            | code | meaning |
            | --- | --- |
            | `not_found` | no such thing |

            ## 5. Streams

            Event types: `agent.started` (`node_id`), `peer.pending`. These are all the types.

            ## 6. Commands

            | cmd | arguments | result members |
            | --- | --- | --- |
            | `peer.add` | `node_id`, `mode?` (continuous\\|once) | `node_id`; the file is edited |
            | `peer.accept` | as `peer.add`; the node must be pending | `rows`: `{a, b:{c}, d:[{e}]}`, where `x` is not |
            | `resolve` | `doc` and one of `pick` (a leaf, not `y`), `delete: true` | `doc`; `not_found` if none; with `_id` |
            """
        let spec = try AdminSpec.parse(text)
        #expect(spec.errorCodes == ["not_found"])
        #expect(spec.eventTypes == ["agent.started", "peer.pending"])
        #expect(spec.commands.map(\.arguments) == [["node_id", "mode"], ["node_id", "mode"], ["doc", "pick", "delete"]])
        let rows = AdminSpec.Members(members: [
            "a": .init(), "b": .init(members: ["c": .init()]), "d": .init(members: ["e": .init()]),
        ])
        #expect(spec.commands[1].results == AdminSpec.Members(members: ["rows": rows]))
        #expect(spec.commands[2].results == AdminSpec.Members(members: ["doc": .init()]))
    }

    @Test("the coverage comparison names what was not exercised and what the spec does not list")
    func coverageComparison() throws {
        let spec = try AdminSpec.parse("""
            ## 4. Error codes

            | code | meaning |
            | --- | --- |
            | `not_found` | no such thing |
            | `failed` | it did not work |

            ## 5. Streams

            Event types: `agent.started`, `config.changed` (`command`: the `stats` it ran), `peer.pending`.

            ## 6. Commands

            | cmd | arguments | result members |
            | --- | --- | --- |
            | `peers` | `verbose?` | `peers`: rows `{node_id, progress:{total}}`, `count` |
            | `stats` | — | `doc_count` |
            """)
        let coverage = AdminCoverage()
        coverage.recordResponse(command: "peers", arguments: ["verbose", "extra"], response: [
            "id": .int(1), "ok": .bool(true), "count": .int(1),
            "peers": .array([.object(["node_id": .string("n"), "progress": .object(["total": .int(0), "done": .int(0)]), "new": .null])]),
        ])
        coverage.recordResponse(command: nil, arguments: [], response: ["ok": .bool(false), "error": .object(["code": .string("busy")])])
        coverage.recordStreamLine(["event": .object(["type": .string("agent.started")])])
        coverage.recordStreamLine(["event": .object(["type": .string("document.pushed")])])
        coverage.recordStreamLine(["event": .object(["type": .string("config.changed"), "data": .object([
            "command": .null, "doc_count": .null, "node_id": .null,
        ])])])
        let (missing, unlisted) = coverage.compare(with: spec)
        #expect(missing == ["command stats", "error failed", "error not_found", "event peer.pending"])
        #expect(unlisted == [
            "argument peers.extra", "error busy", "event data config.changed.node_id", "event document.pushed", "result peers.peers.new",
            "result peers.peers.progress.done",
        ])
    }
}
