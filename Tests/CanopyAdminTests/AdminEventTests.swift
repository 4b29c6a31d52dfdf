import CanopyAdmin
import CanopyCore
import CanopyReplication
import Testing

@Suite("Admin events: typed data, the members §5 lists")
struct AdminEventTests {
    static let current = RevisionID("2-" + String(repeating: "a", count: 32))!
    static let other = RevisionID("2-" + String(repeating: "b", count: 32))!

    static func members(_ event: Admin.DocumentEvent) throws -> [String: JSONValue] {
        try JSONValueEncoder().encodeMembers(event)
    }

    @Test("an engine event from a peer has node_id, origin and deleted as §5 says; its kind is the type, not a member")
    func replicatedDocument() throws {
        let pulled = DocumentEvent(kind: .pulled, documentID: "a", revision: Self.current, deleted: true)
        let event = Admin.DocumentEvent(pulled, nodeID: "PEER", database: .default)
        #expect(event.kind == .changed)
        #expect(try Self.members(event) == [
            "db": .string("default"), "doc": .string("a"), "rev": .string(Self.current.description), "origin": .string("peer"),
            "deleted": .bool(true), "node_id": .string("PEER"),
        ])
        // An import's events come from no peer: no node_id.
        let imported = Admin.DocumentEvent(DocumentEvent(kind: .conflictResolved, documentID: "b", revision: Self.other, detail: "import"), nodeID: "", database: .default)
        #expect(try Self.members(imported) == ["db": .string("default"), "doc": .string("b"), "rev": .string(Self.other.description), "by": .string("import")])
        let failed = Admin.DocumentEvent(DocumentEvent(kind: .resolutionFailed, documentID: "c", detail: "no answer", resolver: "ui"), nodeID: "", database: .default)
        #expect(failed.kind == .resolutionFailed)
        #expect(try Self.members(failed) == ["db": .string("default"), "doc": .string("c"), "reason": .string("no answer"), "resolver": .string("ui")])
    }

    @Test("a local write has origin local and no deleted member unless it is a deletion")
    func localChange() throws {
        #expect(try Self.members(.localChange(db: "notes", doc: "a", rev: Self.current)) == [
            "db": .string("notes"), "doc": .string("a"), "rev": .string(Self.current.description), "origin": .string("local"),
        ])
        #expect(try Self.members(.localChange(db: "notes", doc: "a", rev: Self.current, deleted: true))["deleted"] == .bool(true))
    }

    @Test("a client reads an event's data as the type its type names, and nothing else")
    func clientReads() throws {
        let data = try JSONValueEncoder().encode(Admin.PeerDisconnected(nodeID: "N", reason: "closed"))
        let event = Admin.Event(seq: 4, type: "peer.disconnected", time: 1, data: data)
        #expect(event.data(as: Admin.PeerDisconnected.self) == Admin.PeerDisconnected(nodeID: "N", reason: "closed"))
        #expect(event.data(as: Admin.PeerConnected.self) == nil)
        #expect(event.document == nil)

        let changed = Admin.DocumentEvent.localChange(db: "default", doc: "a", rev: Self.current)
        let line = Admin.Event(seq: 5, type: "document.changed", time: 1, data: try JSONValueEncoder().encode(changed))
        #expect(line.document == changed)
        let waiting = Admin.Event(seq: 6, type: "conflict.waiting", time: 1, data: line.data)
        #expect(waiting.document?.kind == .conflictWaiting)
    }
}

@Suite("Resolver offers on the admin socket")
struct ResolverOfferCodingTests {
    static let current = RevisionID("3-" + String(repeating: "c", count: 32))!
    static let deleted = RevisionID("3-" + String(repeating: "d", count: 32))!
    static let before = RevisionID("2-" + String(repeating: "e", count: 32))!

    @Test("an offer is written with every member §5 lists, nulls included, and read back the same")
    func roundTrip() throws {
        let offer = ResolverOffer(
            ticket: 7, resolver: "ui",
            conflict: Conflict(
                documentID: "a",
                leaves: [
                    ConflictLeaf(revision: Self.current, kind: .live, body: .object(["n": .int(1)])),
                    ConflictLeaf(revision: Self.deleted, kind: .deleted, body: .object([:])),
                ],
                commonAncestorBody: nil, localRevision: Self.before),
            peer: nil, rule: "notes", database: "notes")
        guard case .object(let line) = offer.line, case .object(let members)? = line["resolve"] else {
            Issue.record("not a resolve line: \(offer.line)")
            return
        }
        #expect(members == [
            "ticket": .int(7), "resolver": .string("ui"), "db": .string("notes"), "doc": .string("a"), "rev": .string(Self.current.description),
            "leaves": .array([
                .object(["rev": .string(Self.current.description), "deleted": .bool(false), "body": .object(["n": .int(1)])]),
                .object(["rev": .string(Self.deleted.description), "deleted": .bool(true), "body": .object([:])]),
            ]),
            "ancestor": .null, "local_rev": .string(Self.before.description), "node_id": .null, "rule": .string("notes"),
        ])
        guard case .offer(let read) = try AdminLine.read(line) else {
            Issue.record("the line was not read as an offer")
            return
        }
        #expect(read == offer)
    }

    @Test("an offer without leaves, or with a leaf that names no revision, is refused by name")
    func malformed() {
        let noLeaves: [String: JSONValue] = ["resolve": .object(["ticket": .int(1), "resolver": .string("r"), "doc": .string("a"), "leaves": .array([])])]
        #expect(throws: AdminFailure.self) { try AdminLine.read(noLeaves) }
        let badLeaf: [String: JSONValue] = ["resolve": .object([
            "ticket": .int(1), "resolver": .string("r"), "doc": .string("a"), "leaves": .array([.object(["rev": .string("x")])]),
        ])]
        #expect(throws: AdminFailure.self) { try AdminLine.read(badLeaf) }
        // Without db, the default database's.
        let bare: [String: JSONValue] = ["resolve": .object([
            "ticket": .int(1), "resolver": .string("r"), "doc": .string("a"),
            "leaves": .array([.object(["rev": .string(Self.current.description), "body": .null])]),
        ])]
        if case .offer(let offer)? = try? AdminLine.read(bare) {
            #expect(offer.database == "default" && offer.conflict.leaves[0].body == nil && offer.conflict.leaves[0].kind == .live)
        } else {
            Issue.record("a minimal offer was not read")
        }
    }

    @Test("responses, refusals, events and grants are told apart; an unknown kind is other")
    func lineKinds() throws {
        let response = try AdminLine.read(AdminResponseLine.success(id: 3, [:]).dropLast())
        if case .response(let id, _) = response { #expect(id == 3) } else { Issue.record("\(response)") }
        let busy = try AdminLine.read(AdminResponseLine.failure(id: nil, AdminFailure(.busy, "full")).dropLast())
        if case .refusal(let failure) = busy { #expect(failure.code == .busy) } else { Issue.record("\(busy)") }
        let grant = try AdminLine.read(AdminUploadGrant(id: 4, length: 10).line.dropLast())
        if case .upload(let read) = grant { #expect(read == AdminUploadGrant(id: 4, length: 10)) } else { Issue.record("\(grant)") }
        let event = Admin.EventLine(event: Admin.Event(seq: 1, type: "agent.stopping", time: 2.5, data: .object([:])))
        if case .event(let read) = try AdminLine.read(event.json.objectValue!) { #expect(read.seq == 1) } else { Issue.record("no event") }
        if case .other = try AdminLine.read(["hello": .int(1)]) {} else { Issue.record("an unknown line was not other") }
        #expect(throws: AdminFailure.self) { try AdminLine.read(Array("[1]".utf8)) }
    }
}
