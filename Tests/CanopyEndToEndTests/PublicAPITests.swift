import CanopyCore
import Foundation
import Testing

/// The `Canopy` library's public API, as the compiler sees it, against the listing committed in
/// `Tests/CanopyEndToEndTests/Fixtures/api/Canopy.api`: every public declaration the module
/// itself makes (members that protocols give it are left out), one line each, `path | declaration`,
/// sorted. An accidental change of the API an application compiles against fails here, showing
/// the lines added and removed; an intended one is recorded by running the test with
/// `CANOPY_RECORD_API=1` and committing the file with the change.
///
/// The listing comes from `swift-symbolgraph-extract` run on the module the test build made
/// (`extractSymbolGraphs(into:)`, which `DocumentationTests` uses too).
@Suite("the Canopy library's public API is the one recorded")
struct PublicAPITests {
    static let listing = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/api/Canopy.api")

    /// The public declarations of `Canopy` (its own symbol graph and its extensions of other
    /// modules' types), one line each, sorted.
    static func currentAPI() throws -> [String] {
        let output = TemporaryDirectory()
        try extractSymbolGraphs(into: output.path)
        var lines: [String] = []
        for file in try FileManager.default.contentsOfDirectory(atPath: output.path) where file.hasPrefix("Canopy") && file.hasSuffix(".symbols.json") {
            let graph = try JSONValue.parseInput(try Data(contentsOf: URL(fileURLWithPath: output.path + "/" + file)))
            guard case .array(let symbols)? = graph.objectValue?["symbols"] else { continue }
            for case .object(let symbol) in symbols where symbol["location"] != nil {
                guard case .array(let path)? = symbol["pathComponents"], case .array(let fragments)? = symbol["declarationFragments"] else { continue }
                let name = path.compactMap { if case .string(let part) = $0 { part } else { nil } }.joined(separator: ".")
                let declaration = fragments.compactMap { fragment -> String? in
                    if case .string(let text)? = fragment.objectValue?["spelling"] { text } else { nil }
                }.joined()
                lines.append("\(name) | \(declaration)")
            }
        }
        return lines.sorted()
    }

    /// Writes the public symbol graphs of the `Canopy` module the test build made into
    /// `directory`: `Canopy.symbols.json` and one `Canopy@Module.symbols.json` per module whose
    /// types it extends.
    static func extractSymbolGraphs(into directory: String) throws {
        let sources = ModuleSurfaceTests.sources.path
        let result = try run("/usr/bin/env", [
            "swift-symbolgraph-extract", "-module-name", "Canopy", "-I", Binaries.directory + "/Modules",
            "-I", sources + "/CSodium", "-I", sources + "/CSQLite", "-target", "x86_64-unknown-linux-gnu",
            "-minimum-access-level", "public", "-output-dir", directory,
        ])
        guard result.status == 0 else { throw TimedOut(what: "swift-symbolgraph-extract (\(result.status)): \(result.stderr)") }
    }

    @Test("every public declaration of Canopy is in the recorded listing, and nothing else is")
    func publicAPIMatchesTheRecord() throws {
        let current = try Self.currentAPI()
        #expect(current.count > 50, "the listing looks empty: \(current.count) lines")
        if ProcessInfo.processInfo.environment["CANOPY_RECORD_API"] == "1" {
            try (current.joined(separator: "\n") + "\n").write(to: Self.listing, atomically: true, encoding: .utf8)
        }
        let recorded = try String(contentsOf: Self.listing, encoding: .utf8).split(separator: "\n").map(String.init)
        let added = Set(current).subtracting(recorded).sorted()
        let removed = Set(recorded).subtracting(current).sorted()
        #expect(added.isEmpty && removed.isEmpty, """
            the public API of Canopy changed; if that is intended, run this test with CANOPY_RECORD_API=1 and commit \
            Tests/CanopyEndToEndTests/Fixtures/api/Canopy.api
            added:
            \(added.joined(separator: "\n"))
            removed:
            \(removed.joined(separator: "\n"))
            """)
    }
}
