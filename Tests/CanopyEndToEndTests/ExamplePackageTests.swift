import CanopyTestSupport
import Foundation
import Synchronization
import Testing

/// `Tools/examples/notes-app`: an application in a package of its own that depends on Canopy by
/// path and imports only `Canopy`, built and run as its developer would (`swift build`, then the
/// binary), its source shown verbatim in README.md.
@Suite("an application in its own package builds against Canopy and replicates")
struct ExamplePackageTests {
    static let package = ModuleSurfaceTests.root.appendingPathComponent("Tools/examples/notes-app")
    static let source = package.appendingPathComponent("Sources/notes-app/main.swift")

    @Test("its main.swift imports only Canopy, has at most 25 lines, and is README.md's block byte for byte")
    func sourceIsTheReadmeBlock() throws {
        let text = try String(contentsOf: Self.source, encoding: .utf8)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        #expect(lines.count <= 25, "\(lines.count) lines")
        #expect(lines.filter { $0.hasPrefix("import ") } == ["import Canopy"])
        let readme = try String(contentsOf: ModuleSurfaceTests.root.appendingPathComponent("README.md"), encoding: .utf8)
        #expect(readme.contains("```swift\n" + text + "```\n"), "README.md's notes-app block differs from \(Self.source.path)")
    }

    @Test("swift build makes it, and its two nodes replicate the note over encrypted TCP until the replicator is idle", .timeLimit(.minutes(15)))
    func buildsAndRuns() async throws {
        let scratch = ModuleSurfaceTests.root.appendingPathComponent(".build/examples/notes-app").path
        // Planned afresh each time: a kept plan misses source files added to Canopy since the
        // last build of the example (SwiftPM caches its path dependency's file list).
        let build = try await Self.runOffPool("/usr/bin/env", ["swift", "build", "--package-path", Self.package.path, "--scratch-path", scratch, "--disable-build-manifest-caching"])
        try #require(build.status == 0, "swift build failed:\n\(build.stdout)\n\(build.stderr)")
        let data = TemporaryDirectory()
        let binary = try await Self.runOffPool("/usr/bin/env", ["swift", "build", "--package-path", Self.package.path, "--scratch-path", scratch, "--show-bin-path"])
        let app = binary.stdout.trimmingCharacters(in: .whitespacesAndNewlines) + "/notes-app"
        let result = try await Self.runOffPool(app, [data.path])
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n")
        #expect(lines.contains("replicator: connecting") && lines.contains("replicator: idle"), "\(result.stdout)")
        #expect(lines.last == "Hello from A", "\(result.stdout)")
    }

    /// `run` on a thread of its own: the minutes of a build hold no thread of the cooperative
    /// pool, which the suite's other tests share.
    static func runOffPool(_ path: String, _ arguments: [String]) async throws -> CommandResult {
        try await withCheckedThrowingContinuation { done in
            DispatchQueue.global().async { done.resume(with: Result { try run(path, arguments) }) }
        }
    }

    /// Runs `path` to completion (the test's time limit bounds it) and captures its output.
    static func run(_ path: String, _ arguments: [String]) throws -> CommandResult {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        // stderr is read on another thread so that neither pipe can fill and stall the child.
        let errData = Mutex(Data())
        let reading = DispatchGroup()
        DispatchQueue.global().async(group: reading) {
            let data = err.fileHandleForReading.readDataToEndOfFile()
            errData.withLock { $0 = data }
        }
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        reading.wait()
        process.waitUntilExit()
        return CommandResult(
            status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
            stderr: errData.withLock { String(decoding: $0, as: UTF8.self) })
    }
}
