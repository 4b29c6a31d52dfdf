import Testing
@testable import CanopyAgent

@Suite("Handshake slots shared between sources")
struct HandshakeSlotsTests {
    @Test("one source holds at most its share: its next connection replaces its own oldest handshake")
    func perSourceShare() {
        var slots = HandshakeSlots(totalMax: 8, perSourceMax: 3)
        var admissions: [HandshakeSlots.Admission] = []
        for token in 0..<5 { admissions.append(slots.admit(token, from: "10.0.0.9")) }
        #expect(admissions == [.admit(evicting: nil), .admit(evicting: nil), .admit(evicting: nil), .admit(evicting: 0), .admit(evicting: 1)])
        #expect(slots.count == 3)
        // The evicted handshake's own end gives back nothing: its slot was already given.
        let evictedGaveBack = slots.finished(0)
        let liveGaveBack = slots.finished(2)
        #expect(!evictedGaveBack && liveGaveBack)
        #expect(slots.count == 2)
    }

    @Test("with every slot taken, a new source takes the place of the most represented one's oldest; an equal one is refused")
    func fullPort() {
        var slots = HandshakeSlots(totalMax: 4, perSourceMax: 3)
        var admissions: [HandshakeSlots.Admission] = []
        for (token, source) in ["a", "a", "a", "b", "c", "d", "b"].enumerated() { admissions.append(slots.admit(token, from: source)) }
        // Full after four: "c" gets in at the expense of "a", which holds the most, and so does
        // "d"; then every source holds one, and another from "b" is refused.
        #expect(admissions == [
            .admit(evicting: nil), .admit(evicting: nil), .admit(evicting: nil), .admit(evicting: nil),
            .admit(evicting: 0), .admit(evicting: 1), .refuse,
        ])
        #expect(slots.count == 4)
    }

    @Test("the source of an address is its host, for IPv4 and bracketed IPv6")
    func sources() {
        #expect(HandshakeSlots.source(of: "127.0.0.2:40211") == "127.0.0.2")
        #expect(HandshakeSlots.source(of: "[::1]:4987") == "::1")
        #expect(HandshakeSlots.source(of: "unix") == "unix")
    }
}
