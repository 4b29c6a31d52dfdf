import CanopyAdmin
import CanopyCore
import Testing

@Suite("Admin values to and from JSON values")
struct AdminCodingTests {
    struct Row: Codable, Equatable {
        var nodeID: String
        var lastPushedSeq: Int64?
        var counts: [String: Int64] = [:]
        var body: JSONValue = .object([:])
    }

    struct NullRow: Codable, Equatable, AdminExplicitNulls {
        var nodeID: String
        var lastError: String?
        var rows: [Row] = []
    }

    enum Access: String, CaseIterable, AdminChoice {
        case read, write
        case readWrite = "read-write"
    }

    struct Command: AdminCommand {
        static let name = "test.command"
        typealias Reply = NullRow
        var db: String?
        var revsLimit: Int64?
        var access: Access
        var rev: RevisionID?

        func validate() throws(AdminFailure) {
            if let revsLimit, !(2...100).contains(revsLimit) {
                throw AdminFailure(.invalidArgument, "\"revs_limit\" must be from 2 to 100")
            }
        }
    }

    @Test("the byte-wise conversion of ASCII names agrees with the conversion by characters")
    func snakeCaseFastPath() {
        let keys = ["doc", "nodeID", "lastPushedSeq", "URLPath", "revisionsAdded", "already_snake", "a_B", "x1Y", "ABC", "peerTakes", "ÉtatX", "naïveKey"]
        for key in keys { #expect(AdminKeys.snakeCase(key) == AdminKeys.snakeCaseCharacters(key), "\(key)") }
        #expect(AdminKeys.snakeCase("lastPushedSeq") == "last_pushed_seq" && AdminKeys.snakeCase("URLPath") == "url_path")
    }

    @Test("member names are snake case; a run of capitals is one word")
    func snakeCase() throws {
        struct Names: Encodable {
            var nodeID = 1
            var lastPushedSeq = 2
            var db = 3
            var URLPath = 4
            var peerBytesSent = 5
        }
        let members = try JSONValueEncoder().encodeMembers(Names())
        #expect(Set(members.keys) == ["node_id", "last_pushed_seq", "db", "url_path", "peer_bytes_sent"])
    }

    @Test("nil members are left out, or null for a type with explicit nulls; dictionary keys and bodies stay as they are")
    func encoding() throws {
        let body = JSONValue.object(["camelCase": .array([.int(1), .double(1.5), .null])])
        let row = Row(nodeID: "n", lastPushedSeq: nil, counts: ["someDoc": 3], body: body)
        #expect(try JSONValueEncoder().encode(row) == .object([
            "node_id": .string("n"), "counts": .object(["someDoc": .int(3)]), "body": body,
        ]))
        let nulls = NullRow(nodeID: "n", lastError: nil, rows: [row])
        let encoded = try JSONValueEncoder().encode(nulls)
        #expect(encoded.objectValue?["last_error"] == .null)
        // Explicit nulls are the containing type's choice, not its members'.
        guard case .array(let rows)? = encoded.objectValue?["rows"] else { Issue.record("no rows"); return }
        #expect(rows.first?.objectValue?["last_pushed_seq"] == nil)
        #expect(try JSONValueDecoder().decode(NullRow.self, from: encoded) == nulls)
    }

    @Test("a request line decodes into its command; what is wrong is named")
    func commandArguments() throws {
        func command(_ arguments: [String: JSONValue]) throws(AdminFailure) -> Command {
            try AdminRequestLine(id: 1, command: Command.name, arguments: arguments).command(as: Command.self)
        }
        let revision = "1-282d778ebf6142d3c83cdcf97a8fd858"
        let decoded = try command(["access": .string("read-write"), "revs_limit": .int(5), "rev": .string(revision)])
        #expect(decoded.access == .readWrite && decoded.revsLimit == 5 && decoded.rev?.description == revision && decoded.db == nil)
        // Null is as absent for an optional argument.
        #expect(try command(["access": .string("read"), "db": .null]).db == nil)

        #expect(throws: AdminFailure(.invalidArgument, "\"test.command\" needs \"access\": one of read, write, read-write")) {
            try command([:])
        }
        #expect(throws: AdminFailure(.invalidArgument, "\"access\" must be one of read, write, read-write, not \"all\"")) {
            try command(["access": .string("all")])
        }
        #expect(throws: AdminFailure(.invalidArgument, "\"db\" must be a string")) {
            try command(["access": .string("read"), "db": .int(1)])
        }
        #expect(throws: AdminFailure(.invalidArgument, "\"revs_limit\" must be an integer")) {
            try command(["access": .string("read"), "revs_limit": .string("5")])
        }
        #expect(throws: AdminFailure(.invalidArgument, "\"revs_limit\" must be from 2 to 100")) {
            try command(["access": .string("read"), "revs_limit": .int(1)])
        }
        #expect(throws: AdminFailure(.invalidArgument, "\"rev\" malformed revision id \"1-xyz\"")) {
            try command(["access": .string("read"), "rev": .string("1-xyz")])
        }
        #expect(throws: AdminFailure(.invalidArgument, "\"rev\" must be a revision id (N-<32 hex>)")) {
            try command(["access": .string("read"), "rev": .int(1)])
        }
    }

    @Test("a request line is encoded as the agent reads it, and a response read as the reply or the agent's error")
    func roundTrip() throws {
        let command = Command(db: "notes", revsLimit: 7, access: .write, rev: nil)
        let line = AdminRequestLine.encode(command, id: 9)
        let read = try AdminRequestLine.decode(line).get()
        #expect(read.id == 9 && read.command == "test.command")
        #expect(read.arguments == ["db": .string("notes"), "revs_limit": .int(7), "access": .string("write")])
        #expect(try read.command(as: Command.self).revsLimit == 7)

        let success = try JSONValue.parse(AdminResponseLine.success(id: 9, ["node_id": .string("n"), "last_error": .null, "rows": .array([])]).dropLast())
        #expect(try AdminResponseLine.reply(to: Command.self, from: success.objectValue!).get() == NullRow(nodeID: "n", lastError: nil))

        let failure = try JSONValue.parse(AdminResponseLine.failure(id: 9, AdminFailure(.notFound, "no such thing")).dropLast())
        #expect(throws: AdminFailure(.notFound, "no such thing")) { try AdminResponseLine.reply(to: Command.self, from: failure.objectValue!).get() }

        // A reply of another shape is the client's failure to read it, named, not a crash.
        let odd = try JSONValue.parse(AdminResponseLine.success(id: 9, ["node_id": .int(3)]).dropLast())
        guard case .failure(let problem) = AdminResponseLine.reply(to: Command.self, from: odd.objectValue!) else {
            Issue.record("a reply of the wrong shape was accepted")
            return
        }
        #expect(problem.code == .failed && problem.message.contains("\"node_id\" must be a string"))
    }
}
