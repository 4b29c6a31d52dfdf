import CanopyCore
import CanopyReplication
import Testing

@Suite("Sharing: the rights model")
struct SharingTests {
    static let notes = DatabaseName(validating: "notes")!

    static func filterName(_ filter: ReplicationFilter) -> String {
        switch filter {
        case .all: "all"
        case .idPrefix(let prefix): "prefix \(prefix)"
        case .documentIDs(let ids): "ids \(ids)"
        case .predicate(let name, _): "predicate \(name)"
        }
    }

    @Test("default is shared in each configured peer's direction unless a share says otherwise; other databases only by a share")
    func sharesAndDefaults() {
        let sharing = Sharing(
            shares: [
                Share(database: Self.notes, nodeID: "A", access: .read, prefix: "n-"),
                Share(database: .default, nodeID: "B", access: .none),
                Share(database: .default, nodeID: "C", access: .write),
            ],
            defaultDirections: ["A": .push, "B": .both, "C": .both, "D": .pull])
        #expect(sharing.share(of: .default, with: "A")?.access == .read)  // from its direction, push
        #expect(sharing.share(of: .default, with: "D")?.access == .write)
        #expect(sharing.share(of: .default, with: "B") == nil)  // `none` shares nothing
        #expect(sharing.share(of: .default, with: "C")?.access == .write)  // the share wins over the direction
        #expect(sharing.share(of: .default, with: "E") == nil)  // not a configured peer
        #expect(sharing.share(of: Self.notes, with: "A")?.prefix == "n-")
        #expect(sharing.share(of: Self.notes, with: "D") == nil)  // a direction gives only default
        #expect(sharing.shares(with: "A", among: [.default, Self.notes]).map(\.database) == [.default, Self.notes])
    }

    @Test("what may be sent to a peer and taken from it follows its access and prefix")
    func documentFlow() {
        let sharing = Sharing(
            shares: [
                Share(database: Self.notes, nodeID: "R", access: .read, prefix: "a-"),
                Share(database: Self.notes, nodeID: "W", access: .write),
                Share(database: Self.notes, nodeID: "RW", access: .readWrite, prefix: "b-"),
            ],
            defaultDirections: [:])
        #expect(sharing.maySend("a-1", of: Self.notes, to: "R") && !sharing.maySend("b-1", of: Self.notes, to: "R"))
        #expect(!sharing.mayAccept("a-1", of: Self.notes, from: "R"))
        #expect(sharing.mayAccept("anything", of: Self.notes, from: "W") && !sharing.maySend("anything", of: Self.notes, to: "W"))
        #expect(sharing.maySend("b-1", of: Self.notes, to: "RW") && sharing.mayAccept("b-1", of: Self.notes, from: "RW"))
        #expect(!sharing.maySend("a-1", of: Self.notes, to: "RW") && !sharing.mayAccept("a-1", of: Self.notes, from: "RW"))
        #expect(!sharing.maySend("a-1", of: .default, to: "R"))  // not shared at all
    }

    @Test("a share's replication: its direction, and its scope both ways; no direction for none")
    func replication() throws {
        let base = ReplicationConfiguration(direction: .both, pullFilter: .all, pushFilter: .all)
        let read = Share(database: Self.notes, nodeID: "R", access: .read, prefix: "a-")
        let configuration = try #require(Sharing.replication(of: read, scope: Sharing.scope(of: read), base))
        #expect(configuration.direction == .push)
        #expect(Self.filterName(configuration.pushFilter) == "prefix a-" && Self.filterName(configuration.pullFilter) == "prefix a-")
        let write = Share(database: Self.notes, nodeID: "W", access: .write)
        #expect(Sharing.replication(of: write, scope: Sharing.scope(of: write), base)?.direction == .pull)
        #expect(Self.filterName(Sharing.scope(of: write)) == "all")
        #expect(Sharing.replication(of: Share(database: Self.notes, nodeID: "N", access: .none), scope: .all, base) == nil)
        let refusal = Sharing.refusal(of: Self.notes)
        #expect(refusal.code == .forbidden && refusal.message == "database notes is not shared with you")
    }

    @Test("pending offers: new once, then again; dismissed ones are not listed and stay quiet; the least recently seen makes room")
    func pendingOffers() {
        var offers = PendingOffers(capacity: 2)
        let first = ShareKey(Self.notes, "A")
        let second = ShareKey(.default, "B")
        #expect(offers.record(first, at: 1) == .new)
        #expect(offers.record(first, at: 2) == .again)
        #expect(offers.offers[first] == PendingOffers.Offer(attempts: 2, firstSeen: 1, lastSeen: 2))
        #expect(offers.record(second, at: 3) == .new)
        #expect(offers.listed.map(\.key) == [second, first])  // by database, then node id
        #expect(offers.dismiss(first) && !offers.dismiss(first))
        #expect(offers.listed.map(\.key) == [second])
        #expect(offers.record(first, at: 4) == .dismissed)
        // Full: the least recently seen (second, at 3) makes room.
        let third = ShareKey(Self.notes, "C")
        #expect(offers.record(third, at: 5) == .new)
        #expect(Set(offers.offers.keys) == [first, third])
        #expect(offers.removeAll(from: "A") && !offers.removeAll(from: "A"))
        #expect(offers.remove(third) && offers.offers.isEmpty)
    }
}
