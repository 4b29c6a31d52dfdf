import Foundation
import Testing

/// The `Canopy` DocC catalog (`Sources/Canopy/Canopy.docc`) builds with `docc convert` against the
/// symbol graphs of the module the test build made, without a warning: a broken ``Symbol`` or
/// <doc:Article> link, in an article or in a doc comment of `Sources/Canopy`, fails here with
/// docc's diagnostics. The articles' Swift blocks are compiled and run by `DocCExamplesTests`.
@Suite("the Canopy library's documentation builds")
struct DocumentationTests {
    static let catalog = ModuleSurfaceTests.sources.appendingPathComponent("Canopy/Canopy.docc")

    @Test("docc converts the Canopy catalog with the module's symbol graphs and reports no warning or error")
    func catalogBuildsWithoutWarnings() throws {
        let graphs = TemporaryDirectory()
        try PublicAPITests.extractSymbolGraphs(into: graphs.path)
        let output = TemporaryDirectory()
        let result = try run("/usr/bin/env", [
            "docc", "convert", Self.catalog.path, "--additional-symbol-graph-dir", graphs.path,
            "--fallback-display-name", "Canopy", "--fallback-bundle-identifier", "org.canopy.Canopy",
            "--output-path", output.path + "/Canopy.doccarchive", "--warnings-as-errors",
        ])
        let diagnostics = result.stderr + result.stdout
        #expect(
            result.status == 0 && !diagnostics.contains("warning:") && !diagnostics.contains("error:"),
            "docc convert of \(Self.catalog.path) exited with \(result.status):\n\(diagnostics)")
    }
}

/// The user's documents: a README read in minutes, and reference beside what it describes, every
/// path it names inside this repository.
@Suite("the README and the reference it points to")
struct ReadmeDocumentTests {
    static let root = ModuleSurfaceTests.root

    /// The README, the tools' reference pages, the specifications and the DocC articles.
    static func documents() throws -> [String] {
        var paths = ["README.md", "Tools/canopyd/README.md", "Tools/canopyctl/README.md", "Tools/canopy-sim/README.md",
                     "Tools/canopy-bench/README.md", "Tools/canopy-torture/README.md", "Tools/examples/README.md", "Tools/fuzz/README.md"]
        for folder in ["Protocol", "Sources/Canopy/Canopy.docc"] {
            let names = try FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent(folder).path)
            paths += names.filter { $0.hasSuffix(".md") }.sorted().map { folder + "/" + $0 }
        }
        return paths
    }

    @Test("README.md has at most 300 lines and starts with the two commands, Tools/demo and Tools/test")
    func readmeIsShortAndStartsWithTheTwoCommands() throws {
        let text = try String(contentsOf: Self.root.appendingPathComponent("README.md"), encoding: .utf8)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        #expect(lines.count <= 300, "README.md has \(lines.count) lines")
        let block = try #require(text.components(separatedBy: "```sh\n").dropFirst().first?.components(separatedBy: "```")[0])
        let commands = block.split(separator: "\n").map { $0.split(separator: " ").first.map(String.init) ?? "" }
        #expect(commands == ["Tools/demo", "Tools/test"], "README.md's first sh block: \(block)")
        #expect(text.contains("## A five-minute tour") && text.contains("## Embedding in 25 lines") && text.contains("## Known issues"))
    }

    @Test("every repository path a document names in backticks exists in this repository")
    func namedPathsExist() throws {
        // `Tools/…`, `Protocol/…`, `Sources/…`, `Tests/…` as a whole code span, a trailing `/` allowed.
        let span = #/`((?:Tools|Protocol|Sources|Tests)/[A-Za-z0-9_./+-]*)`/#
        var checked = 0
        for document in try Self.documents() {
            let text = try String(contentsOf: Self.root.appendingPathComponent(document), encoding: .utf8)
            for match in text.matches(of: span) {
                let path = String(match.1)
                checked += 1
                #expect(FileManager.default.fileExists(atPath: Self.root.appendingPathComponent(path).path), "\(document) names \(path), which is not in the repository")
            }
        }
        #expect(checked > 30, "only \(checked) paths found")
    }
}
