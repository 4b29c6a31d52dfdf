import Canopy
import Foundation
import Testing

// The Swift blocks of the user's documents (README.md, Tools/canopyd/README.md,
// Tools/canopyctl/README.md) that no other test file holds, kept here so that they compile, and
// the DocC article Embedding.md's revision-id block; the tests below run what can run without a
// fixed path. Each paragraph of a block (lines between blank lines) stands here as in its
// document, indented or not.

/// The leaf with the latest `updated_at` (ISO 8601 text sorts by time); deletions win.
func newest(_ conflict: Conflict) -> ResolutionDecision {
    func updated(_ leaf: ConflictLeaf) -> String {
        if case .string(let time)? = leaf.body?.objectValue?["updated_at"] { return time }
        return ""
    }
    if conflict.leaves.contains(where: \.isDeleted) { return .delete }
    return .keep(conflict.leaves.max { updated($0) < updated($1) }!.revision)
}

/// Tools/canopyd/README.md's resolver process, compiled; `ResolverClientEndToEndTests` runs clients like it.
func runNewestResolver() async throws {
    let client = try ResolverClient(socketPath: "/home/me/.canopy/admin.sock", name: "newest")
    try await client.run { offer in newest(offer.conflict) }
}

/// Tools/canopyd/README.md's rules in an embedding application, compiled (it opens `app.sqlite` in the working
/// directory, so it is not run; `ReadmeRulesExampleTests` runs the same rules).
func openRulesDatabase() throws -> Database {
    let rules = ResolutionRules([
        ResolutionRule(name: "notes", fieldValue: "note", strategy: .mergeJSON),
        ResolutionRule(name: "settings", idPrefix: "settings/", strategy: .resolver("newest")),
    ], fallback: .automatic, resolvers: ["newest": ClosureResolver(newest)])
    let db = try Database(path: "app.sqlite", configuration: .init(conflictResolution: .rules(rules)))
    return db
}

func firstRevision() throws -> RevisionID {
    let body = try JSONValue.parse(#"{"title": "hello"}"#)
    let rev = RevisionHasher.revisionID(parent: nil, kind: .live, body: body)
    print(rev)   // 1-<32 hex>: the same on every machine for the same first edit
    return rev
}

@Suite("the documents' Swift blocks are compiled by the tests")
struct ReadmeSwiftBlocksTests {
    /// The documents whose Swift blocks are checked here, with how many blocks each holds at least
    /// (the DocC articles' are checked by `DocCExamplesTests`).
    static let documents = [("README.md", 1), ("Tools/canopyd/README.md", 2), ("Tools/canopyctl/README.md", 0)]

    /// The ```swift blocks of a document, each as its paragraphs of trimmed lines.
    static func blocks(of document: String) throws -> [[[String]]] {
        let readme = try String(contentsOf: ModuleSurfaceTests.root.appendingPathComponent(document), encoding: .utf8)
        var blocks: [[[String]]] = []
        var current: [String]?
        for line in readme.split(separator: "\n", omittingEmptySubsequences: false) {
            if current == nil, line == "```swift" { current = []; continue }
            guard let lines = current else { continue }
            if line == "```" {
                blocks.append(paragraphs(lines))
                current = nil
            } else {
                current = lines + [String(line)]
            }
        }
        return blocks
    }

    /// Lines trimmed of surrounding spaces, grouped between blank lines.
    static func paragraphs(_ lines: [String]) -> [[String]] {
        var result: [[String]] = [[]]
        for line in lines.map({ $0.trimmingCharacters(in: .whitespaces) }) {
            if line.isEmpty { if !result[result.count - 1].isEmpty { result.append([]) } } else { result[result.count - 1].append(line) }
        }
        return result.filter { !$0.isEmpty }
    }

    /// Every Swift file under `Tests/` and `Tools/examples/` (whose packages a test builds and
    /// runs), as trimmed non-blank lines.
    static func testFiles() throws -> [(path: String, lines: [String])] {
        var files: [(String, [String])] = []
        for folder in ["Tests", "Tools/examples"] {
            let walk = try #require(FileManager.default.enumerator(
                at: ModuleSurfaceTests.root.appendingPathComponent(folder), includingPropertiesForKeys: nil))
            for case let url as URL in walk where url.pathExtension == "swift" && !url.path.contains("/.build/") {
                let text = try String(contentsOf: url, encoding: .utf8)
                let lines = text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
                files.append((url.path, lines))
            }
        }
        return files
    }

    @Test("every paragraph of every Swift block of the document stands in one test file (or example package), in order of its lines", arguments: documents.map { $0.0 })
    func everyBlockIsInATestFile(document: String) throws {
        let files = try Self.testFiles()
        let blocks = try Self.blocks(of: document)
        let least = Self.documents.first { $0.0 == document }!.1
        #expect(blocks.count >= least, "\(blocks.count) Swift blocks found in \(document)")
        for block in blocks {
            let holder = files.first { file in
                block.allSatisfy { paragraph in
                    paragraph.allSatisfy { $0.hasPrefix("import ") }
                        ? paragraph.allSatisfy(file.lines.contains)
                        : (0...max(0, file.lines.count - paragraph.count)).contains { start in
                            file.lines.count >= paragraph.count && Array(file.lines[start..<start + paragraph.count]) == paragraph
                        }
                }
            }
            #expect(holder != nil, "no test file holds \(document)'s Swift block starting \"\(block.first?.first ?? "")\"")
        }
    }

    @Test("the Embedding article's first revision id is 1- and 32 hex digits, the same each time")
    func firstRevisionIsContentAddressed() throws {
        let rev = try firstRevision()
        #expect(rev.generation == 1 && rev.description.count == 2 + 32)
        #expect(try firstRevision() == rev)
    }
}
