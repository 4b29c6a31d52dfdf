import Canopy
import Foundation
import Testing

// The first Swift block of README.md's "Embedding the library", verbatim (checked below): it
// compiles here, and the test runs it.

struct Note: Codable, Equatable, Sendable {
    var title: String
    var text: String
}

func keepNotes(at path: String) async throws {
    let db = try Database(path: path)                       // one SQLite file, created if missing
    let first = try db.save(Note(title: "Groceries", text: "milk"), id: "note:1")
    try db.save(Note(title: "Groceries", text: "milk, eggs"), id: "note:1", replacing: first)
    do {
        try db.save(Note(title: "Shopping", text: "milk"), id: "note:1", replacing: first)
    } catch {                                               // stale: `first` is no longer the current revision
        print(error)    // conflict saving "note:1": the save was based on revision 1-… but the current revision is 2-…
    }
    // Merge instead of failing: the closure gets both values and returns the one to save.
    try db.save(Note(title: "Shopping", text: "milk"), id: "note:1", replacing: first) { mine, theirs in
        Note(title: mine.title, text: theirs?.text ?? mine.text)
    }
    let note = try db.document(id: "note:1", as: Note.self)   // Shopping: milk, eggs
    print(note?.title ?? "deleted", note?.text ?? "")
    for try await change in db.changes(since: 0) {          // every document, then live changes
        print(change.documentID, change.current)
        break
    }
}

@Suite("README.md's library example")
struct ReadmeEmbeddingExampleTests {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The first ```swift block after the "## Embedding the library" heading.
    static func embeddingBlock() throws -> String {
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let section = try #require(readme.range(of: "\n## Embedding the library\n"))
        let open = try #require(readme.range(of: "```swift\n", range: section.upperBound..<readme.endIndex))
        let close = try #require(readme.range(of: "\n```\n", range: open.upperBound..<readme.endIndex))
        return String(readme[open.upperBound..<close.lowerBound])
    }

    @Test("the README's embedding example is this file's code, byte for byte")
    func readmeBlockIsCompiledHere() throws {
        let block = try Self.embeddingBlock()
        let source = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        #expect(block.contains("Database(path:"), "the README's first embedding block no longer shows Database")
        #expect(source.contains(block), "README.md's embedding example differs from \(#filePath); copy one to the other")
    }

    @Test("the README's embedding example runs and leaves the merged note")
    func readmeExampleRuns() async throws {
        let directory = TemporaryDirectory()
        try await keepNotes(at: directory.path("notes.sqlite"))
        let db = try Database(path: directory.path("notes.sqlite"))
        #expect(try db.document(id: "note:1", as: Note.self) == Note(title: "Shopping", text: "milk, eggs"))
    }
}
