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
