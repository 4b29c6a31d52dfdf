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
