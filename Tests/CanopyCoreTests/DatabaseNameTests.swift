import CanopyCore
import Testing

@Suite("Database names follow CouchDB's rule")
struct DatabaseNameTests {
    @Test("names CouchDB accepts are valid", arguments: ["default", "a", "notes", "team/notes", "x0_$()+-/", String(repeating: "b", count: 238)])
    func valid(name: String) {
        #expect(DatabaseName(validating: name)?.text == name)
        #expect(DatabaseName.problem(with: name) == nil)
    }

    @Test("each broken rule is named", arguments: [
        ("", "may not be empty"), ("Notes", "starts with a lowercase letter"), ("1notes", "starts with a lowercase letter"),
        ("_users", "starts with a lowercase letter"), ("notes.db", "only lowercase letters"), ("no tes", "only lowercase letters"),
        ("notés", "only lowercase letters"), (String(repeating: "b", count: 239), "at most 238 bytes (this one has 239)"),
    ])
    func invalid(name: String, reason: String) throws {
        #expect(DatabaseName(validating: name) == nil)
        let problem = try #require(DatabaseName.problem(with: name))
        #expect(problem.contains(reason), "\(problem)")
    }
}
