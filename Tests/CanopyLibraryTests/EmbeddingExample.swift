import Canopy
import Foundation
import Testing

// The first Swift block of the DocC article Embedding.md (Sources/Canopy/Canopy.docc), verbatim
// (checked below): it compiles here, and the test runs it.

struct Note: Codable, Equatable, Sendable {
    var title: String
    var text: String
}

func keepNotes(at path: String) async throws {
    let db = try Database(path: path)                       // one SQLite file, created if missing
    let first = try await db.save(Note(title: "Groceries", text: "milk"), id: "note:1")
    try await db.save(Note(title: "Groceries", text: "milk, eggs"), id: "note:1", replacing: first)
    do {
        try await db.save(Note(title: "Shopping", text: "milk"), id: "note:1", replacing: first)
    } catch {                                               // stale: `first` is no longer the current revision
        print(error)    // conflict saving "note:1": the save was based on revision 1-… but the current revision is 2-…
    }
    // Merge instead of failing: the closure gets both values and returns the one to save.
    try await db.save(Note(title: "Shopping", text: "milk"), id: "note:1", replacing: first) { mine, theirs in
        Note(title: mine.title, text: theirs?.text ?? mine.text)
    }
    let note = try await db.document(id: "note:1", as: Note.self)   // Shopping: milk, eggs
    print(note?.title ?? "deleted", note?.text ?? "")
    for try await change in db.changes(since: 0) {          // every document, then live changes
        print(change.documentID, change.current)
        break
    }
}

@Suite("the Embedding article's database example")
struct EmbeddingExampleTests {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static let article = root.appendingPathComponent("Sources/Canopy/Canopy.docc/Embedding.md")

    /// The ```swift blocks of the Embedding article, in order.
    static func articleBlocks() throws -> [String] {
        let text = try String(contentsOf: article, encoding: .utf8)
        return text.components(separatedBy: "```swift\n").dropFirst().map { $0.components(separatedBy: "\n```\n")[0] }
    }

    /// The first ```swift block of the Embedding article.
    static func embeddingBlock() throws -> String {
        try #require(try articleBlocks().first, "\(article.path) has no Swift block")
    }

    @Test("the Embedding article's database example is this file's code, byte for byte")
    func readmeBlockIsCompiledHere() throws {
        let block = try Self.embeddingBlock()
        let source = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        #expect(block.contains("Database(path:"), "the Embedding article's first block no longer shows Database")
        #expect(source.contains(block), "Embedding.md's database example differs from \(#filePath); copy one to the other")
    }

    @Test("the Embedding article's database example runs and leaves the merged note")
    func readmeExampleRuns() async throws {
        let directory = TemporaryDirectory()
        try await keepNotes(at: directory.path("notes.sqlite"))
        let db = try Database(path: directory.path("notes.sqlite"))
        #expect(try await db.document(id: "note:1", as: Note.self) == Note(title: "Shopping", text: "milk, eggs"))
    }
}
